"""``backend="local"``: every replica a subprocess of the task on the worker, addresses on 127.0.0.1.

The replicas are children of the task, so the task always waits for them (no deferral) and a killed task stops
them all.
"""

from __future__ import annotations

import json
import os
import sys
import time
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, ClassVar

from airflow_distributed.backends.base import BackendSettings, DistributedJobError, TaskCalls, one_process_per_replica
from airflow_distributed.backends.local_live import LIVE_XCOM_KEY, LiveJobReport
from airflow_distributed.jobstate import outcome as ending
from airflow_distributed.jobstate.outcome import JobOutcome, failure_message
from airflow_distributed.outputs import job_record, job_result, parse_output_document
from airflow_distributed.plan import Layout, LocalAddressing, build_plan, replica_count
from airflow_distributed.status import render_table

if TYPE_CHECKING:
    from airflow.sdk import Context

    from airflow_distributed.hooks.local import LocalJob, LocalProcessHook
    from airflow_distributed.spec import TrainingSpec


class LocalBackend:
    """``backend="local"``: subprocesses on the worker, no cluster."""

    name: ClassVar[str] = "local"

    def __init__(self) -> None:
        #: the running job's replicas, for ``kill``
        self._job: LocalJob | None = None
        #: ``kill`` came; it may come while the replicas are being started, before ``_job`` is known
        self._killed = False
        self._stop_grace_period = 5.0
        self._log: Any = None

    def check(self, settings: BackendSettings, spec: TrainingSpec | None) -> list[tuple[str, str]]:
        problems = []
        if not settings.wait_for_completion:
            problems.append(("wait_for_completion", "the local backend's replicas are children of the task, "
                             "so it always waits; use backend='kubernetes' to start a job and return"))
        return problems + one_process_per_replica(settings.environment)

    def resume(self, task: TaskCalls, settings: BackendSettings, context: Context,
               event: dict[str, Any]) -> dict[str, Any]:
        raise DistributedJobError("backend='local' never defers, so it has nothing to resume")

    def kill(self) -> None:
        # Runs in the task's SIGTERM handler, on the main thread between two bytecodes of ``run``: the flag
        # covers a kill that lands after the replicas were started but before ``run`` holds them.
        self._killed = True
        job = self._job
        if job is not None:
            if self._log is not None:
                self._log.info("task killed: stopping every replica")
            job.stop(self._stop_grace_period)

    def run(self, task: TaskCalls, settings: BackendSettings, context: Context, spec: TrainingSpec, name: str,
            command: Sequence[str]) -> dict[str, Any]:
        from airflow_distributed.hooks.local import LocalProcessHook

        log = self._log = task.log
        self._stop_grace_period = settings.stop_grace_period
        hook = LocalProcessHook(logger=log)
        work_dir, model_dir, checkpoint_dir = local_dirs(settings, name)
        os.makedirs(model_dir, exist_ok=True)
        hook.make_work_dir(work_dir)
        try:
            return self._run_job(task, settings, context, spec, name, command, hook, work_dir,
                                 Layout(model_dir=model_dir, output_path=os.path.join(work_dir, "output.json"),
                                        files_dir=os.path.join(work_dir, "files"), checkpoint_dir=checkpoint_dir))
        finally:
            # Its files (a function's arguments) and output document go with the job, whatever its ending.
            hook.remove_work_dir(work_dir)

    def _run_job(self, task: TaskCalls, settings: BackendSettings, context: Context, spec: TrainingSpec, name: str,
                 command: Sequence[str], hook: LocalProcessHook, work_dir: str, layout: Layout) -> dict[str, Any]:
        """Start the job in its work folder (the replicas' working directory), wait for it, report it."""
        from airflow_distributed.manifests.local import process_specs, resolve_python

        log = task.log
        output_path, checkpoint_dir = layout.output_path, layout.checkpoint_dir or ""
        if os.path.exists(output_path):
            os.remove(output_path)  # a retry must not report the previous try's metrics
        interpreter = settings.python or sys.executable
        addressing = LocalAddressing(ports=hook.free_ports(replica_count(spec)))
        program = task.replica_program(list(command), layout)
        plan = build_plan(spec, name, addressing, layout, resolve_python(program.command, interpreter),
                          backend="local", env=settings.env, try_number=context["ti"].try_number,
                          files=program.files, secret_files=program.secret_files)
        specs = process_specs(
            plan,
            interpreter=interpreter,
            gpus=hook.visible_gpus(),
            cpu_count=os.cpu_count() or 1,
            base_env=os.environ,
        )
        hook.write_files(layout.files_dir, {**plan.files, **plan.secret_files})
        log.info("job %s: %s with %d replicas on the local backend", name, spec.framework, len(specs))
        started = time.monotonic()
        job = self._job = hook.start(specs, cwd=work_dir, elastic=plan.elastic)
        if self._killed:  # killed while they were starting: nothing may outlive the task
            log.info("task killed while its replicas started: stopping every replica")
            job.stop(settings.stop_grace_period)
        live = LiveJobReport(
            job_name=name, framework=spec.framework, read_document=lambda: _read_text(output_path),
            publish=lambda record: context["ti"].xcom_push(key=LIVE_XCOM_KEY, value=record),
            logs=lambda: {replica.spec.name: list(replica.tail) for replica in job.replicas}, log=log,
        )
        try:
            outcome = job.wait(
                poll_interval=settings.poll_interval,
                settle=settings.settle_period,
                on_change=lambda rows: log.info("replicas of %s:\n%s", name, render_table(rows)),
                on_poll=live,
            )
        finally:
            job.stop(settings.stop_grace_period)
            self._job = None
        elapsed = time.monotonic() - started
        log.info("replicas of %s (final):\n%s", name, render_table(outcome.replicas))
        # Read on failure too: metrics logged before a crash help whoever looks at the failed run.
        document = parse_output_document(_read_text(output_path))
        result = job_result(
            job_name=name, framework=spec.framework, backend="local",
            state="succeeded" if outcome.succeeded else "failed", document=document, replicas=outcome.replicas,
        )
        logs = {replica.spec.name: list(replica.tail) for replica in job.replicas}
        context["ti"].xcom_push(key="job", value=job_record(result, document, logs, elapsed))
        if not outcome.succeeded:
            raise DistributedJobError(failure_message(name, outcome, elapsed, cleanup_note(outcome)))
        if not settings.keep_checkpoints:
            removed = hook.remove_checkpoints(checkpoint_dir, name)
            if removed:
                log.info("job %s succeeded: removed its %d checkpoint files (keep_checkpoints=False)", name, removed)
        if document["metrics"] == {} and document["model_path"] is None:
            log.warning("the master wrote no output document at %s: no metrics or model path", output_path)
        log.info(
            "job %s succeeded in %.1fs; metrics: %s; model path: %s",
            name, elapsed, json.dumps(result["metrics"]), result["model_path"],
        )
        return result


def local_dirs(settings: BackendSettings, name: str) -> tuple[str, str, str]:
    """The job's work, model and checkpoint directories under ``$AIRFLOW_HOME/distributed`` unless given."""
    home = os.environ.get("AIRFLOW_HOME") or os.path.expanduser("~/airflow")
    work_dir = os.path.join(home, "distributed", "jobs", settings.dag_id, name)
    model_dir = settings.model_dir or os.path.join(home, "distributed", "models", settings.dag_id, name)
    checkpoint_dir = settings.checkpoint_dir or os.path.join(home, "distributed", "checkpoints", settings.dag_id, name)
    return work_dir, model_dir, checkpoint_dir


def cleanup_note(outcome: JobOutcome) -> str:
    """What became of the replicas of a job that did not succeed (``stop()`` has run whatever the ending)."""
    if outcome.ending == ending.STOPPED:
        return "no replica is left running"
    if outcome.ending == ending.TIMED_OUT:
        return "every replica was stopped"
    return "every other replica was stopped"


def _read_text(path: str) -> str | None:
    try:
        with open(path, encoding="utf-8") as handle:
            return handle.read()
    except FileNotFoundError:
        return None


__all__ = ["LocalBackend", "cleanup_note", "local_dirs"]

"""``backend="local"`` when a job runs: start the replicas as subprocesses of the task, wait for them, report the
job.

``backends.local`` imports this module when a job runs, never when a DAG is parsed: it loads the processes' hook
(``hooks.local``, with ``psutil``).
"""

from __future__ import annotations

import functools
import os
import sys
import time
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

from airflow_distributed.backends.base import ForProcesses, TaskCalls
from airflow_distributed.backends.job_end import end_job, log_startup, read_document
from airflow_distributed.backends.job_usage import usage_over_tries
from airflow_distributed.backends.local_live import LIVE_XCOM_KEY, LiveJobReport
from airflow_distributed.contract import ENV_STACKS_DIR, ENV_STACKS_SIGNAL
from airflow_distributed.hooks.local import STACKS_SIGNAL, LocalJob, LocalProcessHook
from airflow_distributed.jobstate.outcome import Ending, JobOutcome
from airflow_distributed.jobstate.progress_watch import HangWatchdog
from airflow_distributed.jobstate.startup import BY_PROGRESS, PROCESS_UNKNOWN, job_startup, process_startup, started
from airflow_distributed.jobstate.usage import ReplicaRun, plan_requests
from airflow_distributed.manifests.local import LOCAL_LAUNCH, process_specs, resolve_python
from airflow_distributed.outputs import DOCUMENT_TEXT_LIMIT
from airflow_distributed.plan import Layout, LocalAddressing, build_plan, replica_count
from airflow_distributed.status import render_table

if TYPE_CHECKING:
    from airflow.sdk import Context

    from airflow_distributed.spec import TrainingSpec


class LocalJobRun:
    """One try's replicas on the worker: ``run`` (``execute``), ``stop`` (``on_kill``).

    :param killed: whether the task was killed, asked again once the replicas are started (a kill may land while
        they start).
    """

    def __init__(self, task: TaskCalls, settings: ForProcesses, killed: Callable[[], bool]) -> None:
        self.task, self.settings, self.log, self.killed = task, settings, task.log, killed
        #: the running job's replicas, for ``stop``
        self.job: LocalJob | None = None

    def stop(self) -> None:
        """The task was killed: stop every replica, if they run. Runs in the task's SIGTERM handler, on the main
        thread between two bytecodes of ``run``."""
        job = self.job
        if job is not None:
            self.log.info("task killed: stopping every replica")
            job.stop(self.settings.options.stop_grace_period)

    def run(self, context: Context, spec: TrainingSpec, name: str, command: Sequence[str]) -> dict[str, Any]:
        settings, log = self.settings, self.log
        hook = LocalProcessHook(logger=log)
        work_dir, model_dir, checkpoint_dir, tensorboard_dir = local_dirs(settings, name)
        os.makedirs(model_dir, exist_ok=True)
        hook.make_work_dir(work_dir)
        try:
            return self._run_job(context, spec, name, command, hook, work_dir,
                                 Layout(model_dir=model_dir, output_path=os.path.join(work_dir, "output.json"),
                                        files_dir=os.path.join(work_dir, "files"), checkpoint_dir=checkpoint_dir,
                                        tensorboard_dir=tensorboard_dir))
        finally:
            # Its files (a function's arguments) and output document go with the job, whatever its ending.
            hook.remove_work_dir(work_dir)

    def _run_job(self, context: Context, spec: TrainingSpec, name: str, command: Sequence[str],
                 hook: LocalProcessHook, work_dir: str, layout: Layout) -> dict[str, Any]:
        """Start the job in its work folder (the replicas' working directory), wait for it, report it."""
        settings, log = self.settings, self.log
        output_path, checkpoint_dir = layout.output_path, layout.checkpoint_dir or ""
        if os.path.exists(output_path):
            os.remove(output_path)  # a retry must not report the previous try's metrics
        interpreter = settings.options.python or sys.executable
        addressing = LocalAddressing(ports=hook.free_ports(replica_count(spec)))
        program = self.task.replica_program(list(command), layout)
        env = dict(settings.env or {})
        stacks_dir = None
        if settings.progress_timeout is not None:  # the replicas print their stacks when the job hangs
            # Each process that can print them says so there: with several in a replica (a launcher's), the
            # hung job's signal goes to those, not to the launcher.
            stacks_dir = os.path.join(work_dir, "stacks")
            env.update({ENV_STACKS_SIGNAL: STACKS_SIGNAL.name, ENV_STACKS_DIR: stacks_dir})
        plan = build_plan(spec, name, addressing, layout, resolve_python(program.command, interpreter),
                          backend="local", launch=LOCAL_LAUNCH, env=env or settings.env,
                          try_number=context["ti"].try_number, files=program.files, secret_files=program.secret_files)
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
        created = time.time()  # the job's creation: its startup phases count from here
        job = self.job = hook.start(specs, cwd=work_dir, elastic=plan.elastic, stacks_dir=stacks_dir)
        if self.killed():  # killed while they were starting: nothing may outlive the task
            log.info("task killed while its replicas started: stopping every replica")
            job.stop(settings.options.stop_grace_period)
        live = LiveJobReport(
            job_name=name, framework=spec.framework, read_document=lambda: _read_text(output_path),
            publish=lambda record: context["ti"].xcom_push(key=LIVE_XCOM_KEY, value=record), log=log,
        )
        startup = StartupNote(name, created, job, log)
        hung = None if settings.progress_timeout is None else HangWatchdog(
            settings.progress_timeout, read_document=lambda: _read_text(output_path),
            master_lines=lambda: job.master.lines)
        try:
            outcome = job.wait(
                poll_interval=settings.options.poll_interval,
                settle=settings.options.settle_period,
                on_change=lambda rows: log.info("replicas of %s:\n%s", name, render_table(rows)),
                on_poll=functools.partial(on_poll, live, startup),
                hung=hung,
            )
        finally:
            job.stop(settings.options.stop_grace_period)
            self.job = None
        elapsed = time.monotonic() - started
        # Read on failure too: metrics logged before a crash help whoever looks at the failed run.
        result = end_job(context, log, name=name, framework=spec.framework, backend="local", outcome=outcome,
                         document=read_document(_read_text(output_path), log), replicas=outcome.replicas,
                         logs={replica.spec.name: list(replica.tail) for replica in job.replicas}, elapsed=elapsed,
                         usage=usage_over_tries(context, local_runs(plan, job.replicas), elapsed, log),
                         cleanup=cleanup_note(outcome), document_at=output_path,
                         startup=local_startup(created, job), startup_logged=startup.logged)
        if not settings.keep_checkpoints:
            removed = hook.remove_checkpoints(checkpoint_dir, name)
            if removed:
                log.info("job %s succeeded: removed its %d checkpoint files (keep_checkpoints=False)", name, removed)
        return result


def on_poll(live: LiveJobReport, startup: StartupNote, rows: Sequence[Any]) -> None:
    """At every poll of a running job: its live record, and its startup once it trains."""
    live(rows)
    startup()


def local_startup(created: float, job: LocalJob) -> dict[str, Any]:
    """The startup phases of a local job from its processes (``jobstate.startup``).

    :param created: when the task set out to start the replicas (epoch seconds).
    """
    replicas = [process_startup(r.spec.name, created=created, started=r.runs()[0][0], first_line=r.first_line_at,
                                first_report=r.first_progress_at) for r in job.replicas]
    return job_startup(replicas, master=job.master.spec.name, unknown=PROCESS_UNKNOWN, created=created)


class StartupNote:
    """Says the job's startup in the task log once, at the first poll after the master's first progress record (the
    job trains); a job whose master reports no progress has it said at its end (``end_job``)."""

    def __init__(self, name: str, created: float, job: LocalJob, log: Any) -> None:
        self.name, self.created, self.job, self.log = name, created, job, log
        self.logged = False

    def __call__(self) -> None:
        if self.logged or self.job.master.first_progress_at is None:  # nothing to say yet: no work either
            return
        startup = local_startup(self.created, self.job)
        if started(startup) and startup.get("rendezvous_by") == BY_PROGRESS:
            log_startup(self.log, self.name, startup)
            self.logged = True


def local_runs(plan: Any, replicas: Sequence[Any]) -> list[ReplicaRun]:
    """Every run of every replica (restarts included), with the requests the plan gave it and its processes."""
    runs = []
    for replica in replicas:
        requests = plan_requests(plan.replica(replica.spec.name).resources)
        runs += [ReplicaRun(replica.spec.name, requests, start, end, plan.processes_per_replica)
                 for start, end in replica.runs()]
    return runs


def local_dirs(settings: ForProcesses, name: str) -> tuple[str, str, str, str]:
    """The job's work, model, checkpoint and TensorBoard directories under ``$AIRFLOW_HOME/distributed`` unless
    given; the checkpoint and TensorBoard ones are the same for every try of the task instance."""
    home = os.environ.get("AIRFLOW_HOME") or os.path.expanduser("~/airflow")
    work_dir = os.path.join(home, "distributed", "jobs", settings.dag_id, name)
    model_dir = settings.model_dir or os.path.join(home, "distributed", "models", settings.dag_id, name)
    checkpoint_dir = settings.checkpoint_dir or os.path.join(home, "distributed", "checkpoints", settings.dag_id, name)
    tensorboard_dir = os.path.join(home, "distributed", "tensorboard", settings.dag_id, name)
    return work_dir, model_dir, checkpoint_dir, tensorboard_dir


def cleanup_note(outcome: JobOutcome) -> str:
    """What became of the replicas of a job that did not succeed (``stop()`` has run whatever the ending)."""
    if outcome.ending == Ending.STOPPED:
        return "no replica is left running"
    if outcome.ending in (Ending.TIMED_OUT, Ending.HUNG):
        return "every replica was stopped"
    return "every other replica was stopped"


def _read_text(path: str) -> str | None:
    """The master's output document, or ``None`` when there is none to read; never more than one character past
    the limit (which then says it is too large), and bytes that are not UTF-8 replaced (which then fail to parse)."""
    try:
        with open(path, encoding="utf-8", errors="replace") as handle:
            return handle.read(DOCUMENT_TEXT_LIMIT + 1)
    except OSError:  # none, or not a file: the job's report is missing, its result stands
        return None


__all__ = ["LocalJobRun", "StartupNote", "cleanup_note", "local_dirs", "local_runs", "local_startup"]

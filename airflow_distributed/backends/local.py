"""``backend="local"``: every replica a subprocess of the task on the worker, addresses on 127.0.0.1.

The replicas are children of the task, so the task always waits for them (no deferral) and a killed task stops
them all.
"""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, ClassVar

from airflow_distributed.backends.base import (
    DistributedJobError,
    ForProcesses,
    Problem,
    ProcessSettings,
    TaskCalls,
    log_ignored,
    trainjob_only,
)
from airflow_distributed.backends.job_end import end_job, read_document
from airflow_distributed.backends.job_usage import usage_over_tries
from airflow_distributed.backends.local_live import LIVE_XCOM_KEY, LiveJobReport
from airflow_distributed.contract import ENV_STACKS_SIGNAL
from airflow_distributed.jobstate import outcome as ending
from airflow_distributed.jobstate.outcome import JobOutcome
from airflow_distributed.jobstate.progress_watch import HangWatchdog
from airflow_distributed.jobstate.usage import ReplicaRun, plan_requests
from airflow_distributed.outputs import DOCUMENT_TEXT_LIMIT
from airflow_distributed.plan import Layout, LocalAddressing, build_plan, replica_count
from airflow_distributed.spec.models import SECTION_OF
from airflow_distributed.status import render_table

if TYPE_CHECKING:
    from airflow.sdk import Context

    from airflow_distributed.hooks.local import LocalJob, LocalProcessHook
    from airflow_distributed.spec import TrainingSpec
    from airflow_distributed.spec.models import PodSettings

#: Pod settings of the spec the local backend refuses: the replicas would start without the variables they give.
REFUSED_POD_SETTINGS = ("secret_refs", "config_map_refs")
#: Pod settings of the spec that mean nothing to processes on one machine: said once per try, then ignored.
IGNORED_POD_SETTINGS = ("node_selector", "affinity", "tolerations", "labels", "annotations", "service_account",
                        "image_pull_secrets", "security_context")
#: Operator arguments of the Kubernetes-side backends, harmless to ignore here: said once per try when given.
IGNORED_ARGUMENTS = {
    "image": "the replicas run on the worker, with python= (default: Airflow's interpreter)",
    "namespace": "the replicas are processes on the worker, in no namespace",
    "clean_pod_policy": "the replicas are processes, all stopped when the job ends",
    "scheduler_name": "the replicas are processes, started by the task",
    "gang_scheduling": "the replicas are processes, all started together by the task",
    "queue_name": "no Kueue admits the replicas: they start at once on the worker",
    "queue_timeout": "the replicas wait in no queue: they start at once on the worker",
    "watch_timings": "there is no Kubernetes API to watch",
}


class LocalBackend:
    """``backend="local"``: subprocesses on the worker, no cluster."""

    name: ClassVar[str] = "local"
    options_class: ClassVar[type] = ProcessSettings

    def __init__(self) -> None:
        #: the running job's replicas, for ``kill``
        self._job: LocalJob | None = None
        #: ``kill`` came; it may come while the replicas are being started, before ``_job`` is known
        self._killed = False
        self._stop_grace_period = 5.0
        self._log: Any = None

    def check(self, settings: ForProcesses, spec: TrainingSpec | None) -> list[tuple[str, str]]:
        return check_local_arguments(settings, spec)

    def resume(self, task: TaskCalls, settings: ForProcesses, context: Context,
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

    def run(self, task: TaskCalls, settings: ForProcesses, context: Context, spec: TrainingSpec, name: str,
            command: Sequence[str]) -> dict[str, Any]:
        from airflow_distributed.hooks.local import LocalProcessHook

        log = self._log = task.log
        log_ignored(log, self.name, ignored_by_local(settings, spec))
        self._stop_grace_period = settings.options.stop_grace_period
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

    def _run_job(self, task: TaskCalls, settings: ForProcesses, context: Context, spec: TrainingSpec, name: str,
                 command: Sequence[str], hook: LocalProcessHook, work_dir: str, layout: Layout) -> dict[str, Any]:
        """Start the job in its work folder (the replicas' working directory), wait for it, report it."""
        from airflow_distributed.manifests.local import process_specs, resolve_python

        log = task.log
        output_path, checkpoint_dir = layout.output_path, layout.checkpoint_dir or ""
        if os.path.exists(output_path):
            os.remove(output_path)  # a retry must not report the previous try's metrics
        interpreter = settings.options.python or sys.executable
        addressing = LocalAddressing(ports=hook.free_ports(replica_count(spec)))
        program = task.replica_program(list(command), layout)
        env = dict(settings.env or {})
        if settings.progress_timeout is not None:  # the replicas print their stacks when the job hangs
            from airflow_distributed.hooks.local import STACKS_SIGNAL

            env[ENV_STACKS_SIGNAL] = STACKS_SIGNAL.name
        plan = build_plan(spec, name, addressing, layout, resolve_python(program.command, interpreter),
                          backend="local", env=env or settings.env, try_number=context["ti"].try_number,
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
            job.stop(settings.options.stop_grace_period)
        live = LiveJobReport(
            job_name=name, framework=spec.framework, read_document=lambda: _read_text(output_path),
            publish=lambda record: context["ti"].xcom_push(key=LIVE_XCOM_KEY, value=record),
            logs=lambda: {replica.spec.name: list(replica.tail) for replica in job.replicas}, log=log,
        )
        hung = None if settings.progress_timeout is None else HangWatchdog(
            settings.progress_timeout, read_document=lambda: _read_text(output_path),
            master_lines=lambda: job.master.lines)
        try:
            outcome = job.wait(
                poll_interval=settings.options.poll_interval,
                settle=settings.options.settle_period,
                on_change=lambda rows: log.info("replicas of %s:\n%s", name, render_table(rows)),
                on_poll=live,
                hung=hung,
            )
        finally:
            job.stop(settings.options.stop_grace_period)
            self._job = None
        elapsed = time.monotonic() - started
        # Read on failure too: metrics logged before a crash help whoever looks at the failed run.
        result = end_job(context, log, name=name, framework=spec.framework, backend="local", outcome=outcome,
                         document=read_document(_read_text(output_path), log), replicas=outcome.replicas,
                         logs={replica.spec.name: list(replica.tail) for replica in job.replicas}, elapsed=elapsed,
                         usage=usage_over_tries(context, local_runs(plan, job.replicas), elapsed, log),
                         cleanup=cleanup_note(outcome), document_at=output_path)
        if not settings.keep_checkpoints:
            removed = hook.remove_checkpoints(checkpoint_dir, name)
            if removed:
                log.info("job %s succeeded: removed its %d checkpoint files (keep_checkpoints=False)", name, removed)
        return result


def local_runs(plan: Any, replicas: Sequence[Any]) -> list[ReplicaRun]:
    """Every run of every replica (restarts included), with the requests the plan gave it."""
    runs = []
    for replica in replicas:
        requests = plan_requests(plan.replica(replica.spec.name).resources)
        runs += [ReplicaRun(replica.spec.name, requests, start, end) for start, end in replica.runs()]
    return runs


def check_local_arguments(settings: ForProcesses, spec: TrainingSpec | None) -> list[Problem]:
    """Problems with the arguments for ``backend="local"``: settings it cannot honour and whose absence would change
    the job (it always waits; no Secret or ConfigMap gives variables; no volume holds the model; no runtime)."""
    problems: list[Problem] = []
    if not settings.wait_for_completion:
        problems.append(("wait_for_completion", "the local backend's replicas are children of the task, "
                         "so it always waits; use backend='kubernetes' to start a job and return"))
    if settings.argument("model_volume") is not None:
        problems.append(("model_volume", "is mounted in pods only: the local backend's replicas save the model in "
                         "model_dir on the worker; give model_dir= a path or a URL, or use backend='kubernetes'"))
    for path, settings_of in pod_settings(spec):
        for name in REFUSED_POD_SETTINGS:
            if getattr(settings_of, name):
                problems.append((f"{path}.{name}", "the local backend has no Secrets or ConfigMaps: the replicas "
                                 "would start without their variables; give them with env= or use "
                                 "backend='kubernetes'"))
    return problems + trainjob_only(settings, spec, LocalBackend.name)


def ignored_by_local(settings: ForProcesses, spec: TrainingSpec) -> list[Problem]:
    """``(setting, why)`` of each setting the local backend accepts and does not use, for the task log, once per
    try; the spec's pod settings by field, with every path that gives it."""
    ignored: list[Problem] = [(name, why) for name, why in IGNORED_ARGUMENTS.items()
                              if settings.argument(name) is not None]
    if settings.deferrable:
        ignored.append(("deferrable=True", "the replicas are children of the task, which waits for them in its "
                        "worker slot (it may come from [operators] default_deferrable)"))
    if settings.argument("image_pull_grace"):
        ignored.append(("image_pull_grace", "the replicas pull no image"))
    return ignored + ignored_pod_settings(spec, IGNORED_POD_SETTINGS, "the replicas are processes on the worker")


def ignored_pod_settings(spec: TrainingSpec | None, names: Sequence[str], where: str) -> list[Problem]:
    """One ``(paths, why)`` per pod setting of ``names`` the spec gives, with every path that gives it, for a backend
    whose replicas are not pods (``where`` says what they are)."""
    ignored: list[Problem] = []
    for name in names:
        paths = [f"{path}.{name}" for path, settings_of in pod_settings(spec) if getattr(settings_of, name)]
        if paths:
            ignored.append((", ".join(paths), f"it is a pod's setting, and {where}"))
    return ignored


def pod_settings(spec: TrainingSpec | None) -> list[tuple[str, PodSettings]]:
    """Every place of the spec that holds pod settings, with its path: the master's, then each role's."""
    if spec is None:
        return []
    found: list[tuple[str, PodSettings]] = [("environment", spec.environment)]
    section = getattr(spec.environment, SECTION_OF[spec.framework])
    if section is None:
        return found
    path = f"environment.{SECTION_OF[spec.framework]}"
    for role in ("worker", "ps"):
        default = getattr(section, f"default_{role}", None)
        if default is not None:
            found.append((f"{path}.default_{role}", default))
        found.extend((f"{path}.{role}[{position}]", entry)
                     for position, entry in enumerate(getattr(section, role, None) or ()))
    return found


def local_dirs(settings: ForProcesses, name: str) -> tuple[str, str, str]:
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
    if outcome.ending in (ending.TIMED_OUT, ending.HUNG):
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


__all__ = [
    "LocalBackend",
    "check_local_arguments",
    "cleanup_note",
    "ignored_by_local",
    "ignored_pod_settings",
    "local_dirs",
    "pod_settings",
]

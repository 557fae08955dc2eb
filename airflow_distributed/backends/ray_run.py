"""``backend="ray"`` when a job runs: submit the Ray Job (or find an earlier try's), wait for it here or in the
triggerer, and end it.

``backends.ray`` imports this module when a job runs, never when a DAG is parsed: it loads ``requests``, the Jobs
API's hook (``hooks.ray``) and the trigger (``triggers.ray``). Ray itself is imported only where a job is submitted
(``RayJobHook.submit``).
"""

from __future__ import annotations

import posixpath
import time
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

from airflow_distributed.backends.base import DistributedJobError, ForRay, Problem, TaskCalls, log_ignored
from airflow_distributed.backends.job_end import end_job, log_startup, read_document
from airflow_distributed.backends.job_run import deferral_deadline
from airflow_distributed.backends.local import ignored_pod_settings
from airflow_distributed.backends.local_live import LIVE_XCOM_KEY, LiveJobReport
from airflow_distributed.hooks.ray import FINAL_STATES, UNREACHABLE, RayJobHook, renew_liveness
from airflow_distributed.jobstate.failures import job_failure
from airflow_distributed.jobstate.job_event import EventKind, JobEvent
from airflow_distributed.jobstate.outcome import Ending, JobOutcome
from airflow_distributed.jobstate.ray_poll import FINAL, GONE, OUTAGE, STOPPED, SUCCEEDED, RayLook, RayPoll, job_ending
from airflow_distributed.jobstate.startup import BY_PROGRESS, started
from airflow_distributed.manifests.ray import (
    DEFAULT_WORK_ROOT,
    RayOptions,
    job_description,
    job_layout,
    last_report,
    ray_job,
    ray_startup,
    renew_interval,
)
from airflow_distributed.status import ReplicaStatus, render_table
from airflow_distributed.triggers.ray import RayJobTrigger

if TYPE_CHECKING:
    from airflow.sdk import Context

    from airflow_distributed.spec import TrainingSpec

#: Pod settings that only describe a pod: said once per try, then ignored.
IGNORED_POD_SETTINGS = ("labels", "annotations")
#: Operator arguments of the Kubernetes-side backends, harmless to ignore here: said once per try when given.
IGNORED_ARGUMENTS = {
    "namespace": "a Ray Job lives in no namespace",
    "clean_pod_policy": "the replicas are processes of the Ray Job, all stopped when it ends",
    "watch_timings": "there is no Kubernetes API to watch",
    "log_replicas": "every replica's lines are in the Ray Job's log; a failed replica's last lines are in the error",
}
#: Seconds between two looks at the job's state (synchronous wait and trigger), whatever ``poll_interval`` is less.
MIN_POLL_INTERVAL = 1.0
#: How long the Jobs API may stay unreachable while a job is waited for before the task gives up on it.
RECONNECT_BUDGET = 300.0
#: How long a kill waits for the cluster to report the job stopped.
STOP_WAIT = 15.0


class RayJobRun:
    """One try's Ray Job on the cluster of connection ``ray_conn_id``: ``run`` (``execute``), ``resume``
    (``execute_complete``), ``stop`` (``on_kill``).

    :param killed: whether the task was killed, asked again once the job is known (a kill may land before).
    """

    def __init__(self, task: TaskCalls, settings: ForRay, killed: Callable[[], bool]) -> None:
        self.task, self.settings, self.log, self.killed = task, settings, task.log, killed
        self.hook = RayJobHook(ray_conn_id=settings.options.ray_conn_id or RayJobHook.default_conn_name)
        #: the job being waited for in this process, for ``stop``
        self.waited: str | None = None

    def stop(self) -> None:
        """The task was killed: stop the job it waits for, if any."""
        name = self.waited
        if name is not None:
            self.log.info("task killed: stopping Ray job %s", name)
            stop_job(self.hook, name, self.log)

    def run(self, context: Context, spec: TrainingSpec, name: str, command: Sequence[str]) -> dict[str, Any]:
        settings, hook, log = self.settings, self.hook, self.log
        log_ignored(log, "ray", ignored_by_ray(settings, spec))
        options = RayOptions.of(settings.options.ray_options)
        info = hook.info(name)
        if info is not None and info.get("status") not in FINAL_STATES:
            log.info("Ray job %s is already running on %s (an earlier try's): waiting for it", name, hook.address)
        else:
            if info is not None:  # an earlier try's, finished: its submission id is needed again
                hook.delete(name)
            model_dir, checkpoint_dir = ray_dirs(settings, name)
            if not settings.model_dir:
                log.warning("model_dir is not set: the model goes to %s on the master's node; on a cluster of several "
                            "nodes give model_dir= a path every node shares", model_dir)
            layout = job_layout(DEFAULT_WORK_ROOT, name, model_dir, checkpoint_dir)
            # No secret files: @task.distributed, whose arguments are one, refuses backend="ray" at parse.
            program = self.task.replica_program(list(command), layout)
            description = job_description(
                spec=spec, job_name=name, command=program.command, layout=layout, files=program.files,
                env=settings.env, options=options, liveness=settings.wait_for_completion,
                try_number=context["ti"].try_number, startup_timeout=settings.startup_timeout,
                settle_period=settings.options.settle_period, stop_grace_period=settings.options.stop_grace_period,
                poll_interval=min(settings.options.poll_interval, 0.5), keep_checkpoints=settings.keep_checkpoints,
                progress_timeout=settings.progress_timeout,
            )
            entrypoint, runtime_env = ray_job(description, settings.options.python or "python")
            hook.submit(name, entrypoint, runtime_env, metadata={"dag_id": settings.dag_id, "job_name": name})
            log.info("job %s: %s with %d replicas submitted to the Ray cluster at %s", name, spec.framework,
                     len(description["bundles"]), hook.address)
        self.waited = name
        if self.killed():
            stop_job(hook, name, log)
        if not settings.wait_for_completion:
            log.info("Ray job %s submitted; not waiting for it (wait_for_completion=False)", name)
            return {"job_name": name}
        renew_every = renew_interval(options.liveness_grace)
        if settings.deferrable:
            self._defer(context, name, spec.framework, renew_every)
        live = _live_report(context, log, name, spec.framework)
        startup = StartupNote(name, log)

        def on_report(logs: str, info: dict[str, Any]) -> None:
            live(logs)
            startup(logs, info)

        try:
            info = wait_for_job(hook, name, max(MIN_POLL_INTERVAL, settings.options.poll_interval), log,
                                on_report=on_report, renew_every=renew_every)
        except BaseException:
            # execution_timeout (AirflowTaskTimeout) or anything else: the job must not outlive the wait.
            stop_job(hook, name, log)
            raise
        finally:
            self.waited = None
        return finish(context, log, settings, hook, name, spec.framework, info, startup_logged=startup.logged)

    def _defer(self, context: Context, name: str, framework: str, renew_every: float) -> None:
        settings = self.settings
        deadline, timeout = deferral_deadline(settings, context)
        trigger = RayJobTrigger(job_name=name, ray_conn_id=settings.options.ray_conn_id or "ray_default",
                                poll_interval=max(MIN_POLL_INTERVAL, settings.options.poll_interval),
                                execution_deadline=deadline, reconnect_budget=RECONNECT_BUDGET,
                                renew_every=renew_every, resume_state={"framework": framework})
        self.log.info("Ray job %s: waiting in the triggerer", name)
        self.waited = None  # the task process ends while deferred: on_kill then has nothing to stop
        self.task.defer(trigger=trigger, method_name="execute_complete", timeout=timeout)

    def resume(self, context: Context, event: dict[str, Any]) -> dict[str, Any]:
        fired = JobEvent.from_payload(event)
        hook, log, name = self.hook, self.log, str(fired.job_name)
        if fired.kind != EventKind.FINAL:  # timeout or a cluster that stayed unreachable: nothing may go on running
            stop_job(hook, name, log)
            outcome = JobOutcome(Ending.TIMED_OUT if fired.kind == EventKind.TIMEOUT else Ending.FAILED,
                                 message=fired.text)
            raise job_failure(name, outcome, float(fired.elapsed or 0.0), "the Ray job was stopped")
        info = hook.info(name) or {"status": fired.state}
        assert fired.resume_state is not None  # the deferral hands the framework to the trigger (``_defer``)
        return finish(context, log, self.settings, hook, name, fired.resume_state["framework"], info)


def _live_report(context: Context, log: Any, name: str, framework: str) -> Callable[[str], None]:
    """What the wait does with the driver's log at each poll: the ``job_live`` XCom of the job view (replicas,
    metrics, progress; no replica's line, which is the task log's), from the driver's latest reports, paced as on the
    local backend."""
    seen: dict[str, Any] = {}
    live = LiveJobReport(job_name=name, framework=framework, read_document=lambda: seen.get("document"),
                         publish=lambda record: context["ti"].xcom_push(key=LIVE_XCOM_KEY, value=record),
                         log=log, backend="ray")

    def on_report(logs: str) -> None:
        report, replicas = last_report(logs, "live"), last_report(logs, "replicas")
        if report is None or replicas is None:
            return
        seen.update(document=report.get("document"))
        live(_statuses(replicas["replicas"]))

    return on_report


def wait_for_job(hook: RayJobHook, name: str, interval: float, log: Any,
                 reconnect_budget: float = RECONNECT_BUDGET,
                 on_report: Callable[[str, dict[str, Any]], None] | None = None,
                 renew_every: float | None = None) -> dict[str, Any]:
    """The job's details once it is in a final state; the replicas' table in the task log as it changes. The Jobs
    API may be unreachable for up to ``reconnect_budget`` seconds in a row: that is not a failure of the job. Each
    look is judged by ``jobstate.ray_poll``, as in the trigger; this function does its requests and the pause.

    :param on_report: called with the driver's log and the job's details at every poll while the job runs.
    :param renew_every: seconds between two renewals of the job's liveness (``None``: none), the first at once.
    """
    last_rows: Any = None
    poll = RayPoll(reconnect_budget, renew_every)
    while True:
        info: dict[str, Any] | None = None
        report, renewed_at, failure = None, None, None
        try:
            info = hook.info(name)
            if info is not None and job_ending(info) is None:  # the job goes on
                if poll.renewal_due(time.monotonic()):
                    renewed_at = time.monotonic()
                    renew_liveness(hook, name, log)
                logs = hook.logs(name)
                report = last_report(logs, "replicas")
                if on_report is not None:
                    on_report(logs, info)
        except UNREACHABLE as error:
            failure, report = error, None
        poll, verdict = poll.step(RayLook(info, failure is not None, renewed_at), time.monotonic())
        if verdict == FINAL and info is not None:
            return info
        if verdict == GONE:
            raise DistributedJobError(f"Ray job {name} is gone from the cluster (deleted while it ran?)")
        if verdict == OUTAGE:
            raise DistributedJobError(f"the Ray Jobs API at {hook.address} stayed unreachable for "
                                      f"{reconnect_budget:g}s while job {name} ran: {failure}") from None
        if failure is not None:
            log.warning("the Ray Jobs API is unreachable (%s); trying again", type(failure).__name__)
        if report is not None and report["replicas"] != last_rows:
            last_rows = report["replicas"]
            log.info("replicas of %s:\n%s", name, render_table(_statuses(last_rows)))
        time.sleep(interval)


class StartupNote:
    """Says the job's startup in the task log once, at the first poll after the driver reported it (the master's
    first progress record: the job trains); a job whose master reports no progress has it said at its end."""

    def __init__(self, name: str, log: Any) -> None:
        self.name, self.log = name, log
        self.logged = False

    def __call__(self, logs: str, info: dict[str, Any]) -> None:
        if self.logged:
            return
        startup = ray_startup(last_report(logs, "startup"), submitted_at(info))
        if started(startup) and startup.get("rendezvous_by") == BY_PROGRESS:
            log_startup(self.log, self.name, startup)
            self.logged = True


def submitted_at(info: dict[str, Any] | None) -> float | None:
    """When the Ray Job was submitted (its ``start_time``, milliseconds since the epoch), in epoch seconds."""
    start = (info or {}).get("start_time")
    return start / 1000 if isinstance(start, (int, float)) and not isinstance(start, bool) and start > 0 else None


def finish(context: Context, log: Any, settings: ForRay, hook: RayJobHook, name: str, framework: str,
           info: dict[str, Any], startup_logged: bool = False) -> dict[str, Any]:
    """The job ended: its outcome from the driver's last report, the ``job`` XCom (with the job's startup phases,
    from the driver's report), the result or the error.

    :param startup_logged: the wait said the job's startup in the task log already.
    """
    logs = hook.logs(name)
    report = last_report(logs, "outcome") or {}
    rows = _statuses(report.get("replicas") or [])
    succeeded = info.get("status") == SUCCEEDED and report.get("ending") == Ending.SUCCEEDED
    return end_job(context, log, name=name, framework=framework, backend="ray",
                   outcome=JobOutcome(Ending.SUCCEEDED, rows) if succeeded else _outcome(info, report, logs),
                   document=read_document(report.get("document"), log), replicas=rows,
                   logs=report.get("logs") or {}, elapsed=_elapsed(info),
                   cleanup="no replica is left running and its placement group is removed",
                   startup=ray_startup(report.get("startup") or last_report(logs, "startup"), submitted_at(info)),
                   startup_logged=startup_logged)


def _outcome(info: dict[str, Any], report: dict[str, Any], logs: str) -> JobOutcome:
    """How a job that did not succeed ended: the driver's verdict, else the Ray Job's own state and last lines."""
    rows = _statuses(report.get("replicas") or [])
    if report.get("ending") in tuple(Ending) and report["ending"] != Ending.SUCCEEDED:
        return JobOutcome(report["ending"], rows, report.get("replica"), report.get("exit_code"),
                          message=report.get("message"), tail=tuple(report.get("tail") or ()),
                          logs=(report.get("logs") or {}) if report["ending"] == Ending.HUNG else {})
    if info.get("status") == STOPPED:
        return JobOutcome(Ending.STOPPED, rows)
    # The driver itself failed (the package or Ray missing on the cluster, a bad interpreter...): its own lines.
    tail = tuple(line for line in logs.splitlines() if line.strip())[-15:]
    return JobOutcome(Ending.FAILED, rows, reason=f"the Ray job's driver {str(info.get('status')).lower()}",
                      message=info.get("message"), tail=tail)


def _statuses(rows: Sequence[dict[str, Any]]) -> tuple[ReplicaStatus, ...]:
    return tuple(ReplicaStatus(**row) for row in rows)


def _elapsed(info: dict[str, Any]) -> float:
    start, end = info.get("start_time"), info.get("end_time")
    if not start:
        return 0.0
    return max(0.0, ((end or time.time() * 1000) - start) / 1000)


def stop_job(hook: RayJobHook, name: str, log: Any) -> None:
    """Stop the Ray job and wait for the cluster to report it stopped (its driver removes the placement group)."""
    try:
        if hook.stop(name):
            hook.wait_final(name, STOP_WAIT)
    except Exception as error:
        if log is not None:
            log.error("could not stop Ray job %s: %s; stop it with `ray job stop %s`", name, error, name)


def ray_dirs(settings: ForRay, name: str) -> tuple[str, str]:
    """The job's model and checkpoint folders as the replicas see them (default: under the nodes' work root)."""
    model_dir = settings.model_dir or posixpath.join(DEFAULT_WORK_ROOT, "models", settings.dag_id, name)
    checkpoint_dir = settings.checkpoint_dir or posixpath.join(model_dir, "checkpoints")
    return model_dir, checkpoint_dir


def ignored_by_ray(settings: ForRay, spec: TrainingSpec) -> list[Problem]:
    """``(setting, why)`` of each setting the Ray backend accepts and does not use, for the task log, once per try."""
    ignored: list[Problem] = [(name, why) for name, why in IGNORED_ARGUMENTS.items()
                              if settings.argument(name) is not None]
    if settings.argument("image_pull_grace"):
        ignored.append(("image_pull_grace", "the replicas pull no image"))
    if settings.argument("shm_size") not in (None, "auto"):  # "auto", the default, is no request of the user's
        ignored.append(("shm_size", "the replicas are processes of the Ray cluster's nodes, sharing each node's "
                        "/dev/shm"))
    return ignored + ignored_pod_settings(spec, IGNORED_POD_SETTINGS, "the replicas are processes of a Ray job")


__all__ = ["RayJobRun", "StartupNote", "finish", "ignored_by_ray", "ray_dirs", "stop_job", "wait_for_job"]

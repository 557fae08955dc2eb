"""What ``DistributedTrainingOperator`` does with ``backend="kubernetes"``: plan -> job -> verdict -> XCom.

``KubernetesBackend`` (the ``Backend`` of ``backend="kubernetes"``) calls ``run_kubernetes`` (from ``execute``),
``resume_kubernetes`` (from ``execute_complete`` after a deferral) and ``kill_kubernetes`` (from ``on_kill``), which
read the operator's arguments from ``BackendSettings``; the Kubernetes I/O is the hook's
(``DistributedTrainingHook``) and the trigger's (``DistributedJobTrigger``).

Reattach: job names are fixed per task instance, so a retry, or a worker restarted under the same task
instance, finds the job an earlier attempt created instead of creating a second one. On Airflow 3.3+ the job's
identity is also kept in the task's ``task_state_store`` through ``ResumableJobMixin``; on older versions the
mixin's stand-in submits every time and the submission itself finds the job by name and labels.

Importing this module is cheap (the operator checks its arguments with it when a DAG is parsed): the Kubernetes
clients are imported when a job runs.

Clean-up (``clean_pod_policy``): ``all`` deletes the job (its Service; the rest goes by cascade), ``running``
deletes the pods still pending or running and keeps the finished ones (their logs) until the next try,
``none`` deletes nothing. Default: ``all`` after success, ``running`` after failure. A killed task deletes its
job whatever the policy. Whatever the policy, the job's Secrets (its SSH private key, its function's arguments) are
deleted when it ends: pods may be kept to look at, secrets are not.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, replace
from typing import TYPE_CHECKING, Any, ClassVar

from airflow_distributed.backends.base import log_ignored, trainjob_only
from airflow_distributed.backends.job_run import (
    NOT_CLEANED_UP,
    deferral_deadline,
    event_error_class,
    ignored_in_cluster,
    job_namespace,
    namespace_problems,
    push_success,
    require_image,
    watch_timings,
)
from airflow_distributed.backends.job_usage import usage_over_tries
from airflow_distributed.elastic import CONTINUE, RESTART, ElasticPlan, after_replica_ended, elastic_plan
from airflow_distributed.jobstate import outcome as ending
from airflow_distributed.jobstate.failures import job_failure
from airflow_distributed.jobstate.log_cursor import LogCursor, strip_timestamps
from airflow_distributed.jobstate.outcome import JobOutcome
from airflow_distributed.jobstate.pod_state import log_available
from airflow_distributed.jobstate.replica_table import replica_table
from airflow_distributed.jobstate.usage import ReplicaRun, Requests, pod_run
from airflow_distributed.jobstate.verdicts import JobVerdict, ReplicaSlot, replica_slots, slots_from_json, slots_to_json
from airflow_distributed.live_report import is_record, without_records
from airflow_distributed.manifests.pod_names import RESTARTS_ANNOTATION
from airflow_distributed.outputs import document_warning, job_record, job_result, parse_output_document
from airflow_distributed.plan import KubernetesAddressing, build_plan
from airflow_distributed.status import PENDING, RUNNING, STOPPED, ReplicaStatus
from airflow_distributed.triggers.log_relay import new_lines_after

if TYPE_CHECKING:
    from airflow.sdk import Context

    from airflow_distributed.backends.base import BackendSettings, TaskCalls
    from airflow_distributed.hooks.kubernetes import DistributedTrainingHook, JobHandle
    from airflow_distributed.jobstate.verdicts import ReplicaSlot
    from airflow_distributed.manifests.kubernetes import JobObjects
    from airflow_distributed.plan import ClusterPlan
    from airflow_distributed.spec import TrainingSpec

CLEAN_POD_POLICIES = ("all", "running", "none")
#: ``task_state_store`` key of the job's identity; renaming it breaks the reattach of tries in flight.
STATE_KEY = "airflow_distributed_job"
#: How many replicas' logs may be followed at once (one connection each).
MAX_FOLLOWED_LOGS = 32
TAIL_LINES = 30
#: Endings of a replica an elastic job may restart or carry on without.
LOST_REPLICA_ENDINGS = (ending.EXITED, ending.POD_FAILED, ending.DELETED)
#: Past the task's execution_timeout, how long a pod may still run if nothing deletes it (a worker that died).
DEADLINE_MARGIN_SECONDS = 120

try:
    from airflow.providers.common.compat.sdk import ResumableJobMixin
except ImportError:  # a common-compat provider that predates it: submit on every try (the job is still found)

    class ResumableJobMixin:  # type: ignore[no-redef]
        def execute_resumable(self, context: Any) -> Any:
            external_id = self.submit_job(context)  # type: ignore[attr-defined]
            self.poll_until_complete(external_id, context)  # type: ignore[attr-defined]
            return self.get_job_result(external_id, context)  # type: ignore[attr-defined]


def _ignore(run: Any) -> None:
    """No one to tell of a run that starts."""


#: XCom of a Kubernetes job while it runs: where the job view finds it live.
LIVE_JOB_XCOM_KEY = "kubernetes_job"


def check_kubernetes_arguments(settings: BackendSettings) -> list[tuple[str, str]]:
    """Problems with the operator's Kubernetes arguments, as ``(argument, message)`` for ``SpecValidationError``."""
    problems = namespace_problems(settings.namespace)
    policy = settings.clean_pod_policy
    if policy is not None and policy not in CLEAN_POD_POLICIES:
        problems.append(("clean_pod_policy", f"{policy!r} is not supported; allowed: {', '.join(CLEAN_POD_POLICIES)}"))
    gang = settings.gang_scheduling
    if gang is not None:
        from airflow_distributed.manifests.gang_scheduling import GANG_SCHEDULERS

        if gang not in GANG_SCHEDULERS:
            problems.append(("gang_scheduling", f"{gang!r} is not supported; allowed: {', '.join(GANG_SCHEDULERS)}"))
    return problems


# ---------------------------------------------------------------------------------------------- entry points


def run_kubernetes(task: TaskCalls, settings: BackendSettings, context: Context, spec: TrainingSpec, job_name: str,
                   command: Sequence[str], on_start: Callable[[KubernetesJobRun], None] = _ignore) -> dict[str, Any]:
    """``execute`` for ``backend="kubernetes"``: create or reattach the job, then wait (here or deferred).

    :returns: the ``return_value`` XCom, each key of it an XCom too; ``job`` is pushed here (also on failure).
    :raises DistributedJobError: the job failed, did not start, or was stopped.
    :raises KubernetesJobError: the API refused something for good.
    """
    log_ignored(task.log, "kubernetes", ignored_in_cluster(settings, "kubernetes"))
    run = KubernetesJobRun.start(task, settings, context, spec, job_name, command)
    on_start(run)
    if not settings.wait_for_completion:
        handle = run.submit()
        run.log.info("job %s/%s submitted; not waiting for it (wait_for_completion=False)", handle.namespace,
                     handle.name)
        return {"job_name": handle.name, "namespace": handle.namespace}
    return _ResumableKubernetesJob(run).execute_resumable(context)


def resume_kubernetes(task: TaskCalls, settings: BackendSettings, context: Context, event: dict[str, Any],
                      on_start: Callable[[KubernetesJobRun], None] = _ignore) -> dict[str, Any]:
    """``execute_complete``: the trigger's verdict -> output, logs, clean-up and XCom, as in the synchronous path."""
    run = KubernetesJobRun.resume(task, settings, context, event)
    on_start(run)
    status = event.get("status")
    elapsed = max(0.0, time.time() - float(event.get("started_at") or time.time()))
    if status in ("succeeded", "failed"):
        try:
            tracker = run.hook.job_tracker(run.namespace, run.name, run.slots)
        except BaseException:
            run._clean_up_quietly()
            raise
        verdict = JobVerdict.from_dict(event.get("verdict") or {"state": status})
        pods = tracker.last_pods()
        outcome = verdict.outcome(tracker.statuses(), pods=pods)
        if not verdict.succeeded:
            # Defers again if it restarts one (or carries on without it): the master's lines are shown once, at
            # the end, not at every resume.
            _restart_elastic_replica(run, outcome)
        master = pods.get(run.master.name)
        stamped = run.tail(run.master.name, pods, timestamps=True) if log_available(master) else []
        # The trigger showed the master's lines as they came (``log_relay``): only those after its last relay here.
        for line in new_lines_after(event.get("log_cursor"), ((master or {}).get("metadata") or {}).get("uid"),
                                    stamped):
            run.log.info("[%s] %s", run.master.name, line)
        tail = without_records(strip_timestamps(stamped))
        return run.finish(replace(outcome, logs={run.master.name: tail}), elapsed)
    # timeout (execution_timeout reached in the triggerer) or error (the trigger could not watch): clean up, fail.
    # A timeout ends the job as the synchronous wait's does, as a kill: the whole job is deleted, not kept for a look.
    # The trigger's error is the one to fail with, as the synchronous wait's is: nothing is read first, and a clean-up
    # that fails is logged (after a refused watch every request may be refused: the task's rights were taken away).
    timed_out = status == "timeout"
    cleaned = run._clean_up_quietly(kill=timed_out)
    note = ("the job was deleted" if timed_out else run.cleanup_note(False)) if cleaned else NOT_CLEANED_UP
    outcome = JobOutcome(ending.TIMED_OUT if timed_out else ending.FAILED, message=event.get("message") or status)
    raise job_failure(f"{run.namespace}/{run.name}", outcome, elapsed, note, default=event_error_class(event))


def _restart_elastic_replica(run: KubernetesJobRun, outcome: JobOutcome) -> None:
    """After a deferral: an elastic job's lost replica is recreated as in the synchronous wait, and the task
    defers again; a decision to fail is left on ``run`` for its failure message."""
    from airflow_distributed.hooks.kubernetes import JobHandle

    if run.elastic is None:
        return
    service = run.hook.get_service(run.namespace, run.name)
    if service is None:
        return
    run.handle = JobHandle(run.namespace, run.name, service["metadata"]["uid"])
    if run._after_failure(outcome):
        run._defer()


def kill_kubernetes(run: KubernetesJobRun | None) -> None:
    """``on_kill``: stop waiting and delete the job (its Service; the pods go by cascade)."""
    if run is None:
        return
    run.stopped = True
    run.log.info("task killed: deleting job %s/%s", run.namespace, run.name)
    try:
        # A hook of its own: the waiting one may be in the middle of a request on this very thread.
        hook = run.new_hook()
        hook.delete_job(run.namespace, run.name)
        delete_secrets(hook, run.namespace, run.name)
    except Exception as error:
        run.log.error("could not delete job %s/%s: %s; delete its Service by hand", run.namespace, run.name, error)


# ---------------------------------------------------------------------------------------------- one job


class KubernetesJobRun:
    """One job of one task instance: its plan, its hook, and the steps of its life."""

    def __init__(self, task: TaskCalls, settings: BackendSettings, context: Context, namespace: str, name: str,
                 slots: Sequence[ReplicaSlot], framework: str, hook: DistributedTrainingHook) -> None:
        self.task, self.settings, self.context = task, settings, context
        self.namespace, self.name = namespace, name
        self.slots = tuple(slots)
        self.framework = framework
        self.hook = hook
        self.log = task.log
        self.stopped = False
        #: the job's objects: built once per try (at start, or for an elastic restart after a deferral) and used for
        #: the create, a reattach and every pod an elastic job recreates
        self.objects: JobObjects | None = None
        self.handle: JobHandle | None = None
        self.started = time.monotonic()
        #: an elastic job's budget: the task restarts its lost replicas (see ``_after_failure``)
        self.elastic: ElasticPlan | None = None
        #: replicas an elastic job carries on without, with their last row of the table
        self.dropped: dict[str, ReplicaStatus] = {}
        self.elastic_failure: str | None = None
        #: runs of pods an elastic job replaced or carries on without: what they cost counts in the job's usage
        self.earlier_runs: list[ReplicaRun] = []
        #: where the trigger stopped relaying the master's log (``log_relay``): a trigger deferred again goes on there
        self.log_cursor: dict[str, Any] | None = None

    @property
    def master(self) -> ReplicaSlot:
        return self.slots[0]

    def new_hook(self) -> DistributedTrainingHook:
        from airflow_distributed.hooks.kubernetes import DistributedTrainingHook

        return DistributedTrainingHook(kubernetes_conn_id=self.settings.kubernetes_conn_id, logger=self.log)

    @classmethod
    def start(cls, task: TaskCalls, settings: BackendSettings, context: Context, spec: TrainingSpec, job_name: str,
              command: Sequence[str]) -> KubernetesJobRun:
        from airflow_distributed.hooks.kubernetes import DistributedTrainingHook

        require_image(settings, "kubernetes")
        hook = DistributedTrainingHook(kubernetes_conn_id=settings.kubernetes_conn_id, logger=task.log)
        namespace = job_namespace(settings, hook, context["ti"].task_id)  # before anything is created
        run = cls(task, settings, context, namespace, job_name, (), spec.framework, hook)
        plan = run.build_objects(spec, command)  # a setting Kubernetes would refuse fails here, before any is created
        run.slots, run.elastic = tuple(replica_slots(plan)), plan.elastic
        return run

    def build_objects(self, spec: TrainingSpec, command: Sequence[str]) -> ClusterPlan:
        """The job's objects, built once, from the plan of this task instance's job (its name and namespace),
        which is returned."""
        from airflow_distributed.manifests.horovod_ssh import generate_ssh_key_pair
        from airflow_distributed.manifests.kubernetes import build_job_objects, layout_for_kubernetes

        settings = self.settings
        layout = layout_for_kubernetes(settings.model_dir, job_name=self.name, checkpoint_dir=settings.checkpoint_dir)
        program = self.task.replica_program(list(command), layout)
        plan = build_plan(spec, self.name, KubernetesAddressing(self.namespace), layout, program.command,
                          backend="kubernetes", env=stacks_env(settings), try_number=self.context["ti"].try_number,
                          files=program.files, secret_files=program.secret_files)
        options = manifest_options(settings, self.context, self.namespace)
        # One key pair per job (its pods get the Service's uid through ``owned_by``, not a second build).
        ssh_key = generate_ssh_key_pair(f"airflow-distributed-{self.name}") if any(
            replica.command is None for replica in plan.replicas) else None
        self.objects = build_job_objects(plan, options, ssh_key=ssh_key)
        return plan

    @classmethod
    def resume(cls, task: TaskCalls, settings: BackendSettings, context: Context,
               event: dict[str, Any]) -> KubernetesJobRun:
        """The run of a job after a deferral, from the trigger's event: its replicas, framework and elastic budget
        ride along in it, so the spec is not parsed again (see ``_defer``)."""
        from airflow_distributed.hooks.kubernetes import DistributedTrainingHook

        hook = DistributedTrainingHook(kubernetes_conn_id=settings.kubernetes_conn_id, logger=task.log)
        state = event.get("resume_state")
        if state is None:  # a trigger deferred by a release that did not hand them back: the spec has them
            spec = task.spec()
            state = {"framework": spec.framework, "elastic": _elastic_of(spec)}
        dropped = {row["name"]: ReplicaStatus(**row) for row in state.get("dropped") or []}
        # The trigger watched the replicas the job still has; those it carries on without (workers, never the
        # master) go back among the job's slots, in plan order, for the final table.
        slots = sorted([*slots_from_json(event["replicas"]),
                        *(ReplicaSlot(row.name, row.role, row.index) for row in dropped.values())],
                       key=lambda slot: (not slot.is_master, slot.role, slot.index))
        run = cls(task, settings, context, event["namespace"], event["job_name"], slots, state["framework"], hook)
        run.elastic = ElasticPlan(**state["elastic"]) if state.get("elastic") else None
        run.dropped = dropped
        run.earlier_runs = [_run_from_json(row) for row in state.get("earlier_runs") or []]
        run.log_cursor = event.get("log_cursor")
        return run

    # ------------------------------------------------------------------ submit, state, wait

    def submit(self) -> JobHandle:
        started = time.monotonic()
        assert self.objects is not None
        handle = self.hook.ensure_job(self.namespace, self.objects, self.slots, stopped=lambda: self.stopped)
        self.handle = handle
        if handle.reattached is None:
            self.log.info("job %s/%s: %s with %d replicas created (%d objects) in %.1fs", self.namespace, self.name,
                          self.framework, len(self.slots), handle.created, time.monotonic() - started)
        return handle

    def status_of(self, external_id: dict[str, Any]) -> str:
        """``running``, ``succeeded``, ``failed`` or ``absent`` (for ``ResumableJobMixin``)."""
        namespace, name = external_id.get("namespace"), external_id.get("name")
        if (namespace, name) != (self.namespace, self.name):
            return "absent"  # another namespace or name since: not this task's job any more
        service = self.hook.get_service(self.namespace, self.name)
        if service is None or service["metadata"].get("deletionTimestamp"):
            return "absent"
        verdict = self.hook.job_verdict(self.namespace, self.name, self.slots)
        if verdict is None:
            return "running"
        return verdict.state

    def wait(self) -> dict[str, Any]:
        """Wait here (or defer) for the verdict, then finish. The job exists (``submit`` or reattach)."""
        if self.handle is None:
            # Reconnecting through task_state_store: make sure of the job (and create any pod it lacks).
            self.submit()
        # Lets the job view find the running job's pods before there is a final record.
        self.context["ti"].xcom_push(key=LIVE_JOB_XCOM_KEY, value={
            "job_name": self.name, "namespace": self.namespace,
            "kubernetes_conn_id": self.settings.kubernetes_conn_id, "framework": self.framework,
        })
        if self.settings.deferrable and self.handle.reattached != "succeeded":  # type: ignore[union-attr]
            self._defer()
        # Each followed log's place, across the waits of an elastic job: no line twice after a pod is recreated.
        log_cursors: dict[str, tuple[str, LogCursor]] = {}
        try:
            while True:
                watched = tuple(slot for slot in self.slots if slot.name not in self.dropped)
                outcome = self.hook.wait_for_job(
                    self.namespace, self.name, watched,
                    startup_timeout=self.settings.startup_timeout,
                    queue_timeout=self.settings.queue_timeout,
                    image_pull_grace=self.settings.image_pull_grace,
                    watch_timings=watch_timings(self.settings),
                    on_change=self._log_table,
                    stopped=lambda: self.stopped,
                    follow=self._followed(),
                    emit=self._emit,
                    log_cursors=log_cursors,
                    progress_timeout=self.settings.progress_timeout,
                )
                if not self._after_failure(outcome):
                    break
        except BaseException:
            # The wait itself failed (API gone, execution_timeout): no verdict, but no pod may keep running.
            self._clean_up_quietly()
            raise
        return self.finish(outcome, time.monotonic() - self.started)

    def _after_failure(self, outcome: JobOutcome) -> bool:
        """An elastic job's answer to a replica that ended badly: recreate its pod (same name, so the same
        address) or carry on without it, and wait again (``True``); or let the job fail (``False``)."""
        if self.elastic is None or outcome.replica is None or outcome.ending not in LOST_REPLICA_ENDINGS or \
                self.handle is None:
            return False
        slot = next(s for s in self.slots if s.name == outcome.replica)
        rows = {row.name: row for row in outcome.replicas}
        restarts = rows[slot.name].restarts
        left = sum(1 for name, row in rows.items() if name != slot.name and row.state in (RUNNING, PENDING))
        decision = after_replica_ended(self.elastic, name=slot.name, is_master=slot.is_master,
                                       exit_code=outcome.exit_code if outcome.ending == ending.EXITED else None,
                                       restarts=restarts, left=left)
        self.log.warning("%s", decision.message)
        if decision.action in (RESTART, CONTINUE):  # the lost pod's run is over: it counts in the job's usage
            self.earlier_runs.append(pod_run(slot.name, outcome.pods.get(slot.name), time.time()))
        if decision.action == RESTART:
            from airflow_distributed.manifests.kubernetes import with_owner

            # A copy of the pod and its metadata: the job's objects stay as they were built.
            pod = with_owner(self._pod_manifest(slot.name), self.name, self.handle.uid)
            pod.metadata.annotations = {**(pod.metadata.annotations or {}), RESTARTS_ANNOTATION: str(restarts + 1)}
            self.hook.recreate_pod(self.namespace, pod)
            return True
        if decision.action == CONTINUE:
            self.dropped[slot.name] = rows[slot.name]
            return True
        self.elastic_failure = decision.message
        return False

    def _pod_manifest(self, name: str) -> Any:
        """The pod of replica ``name`` as the job's objects have it. After a deferral they are built again, once:
        a pod needs the whole spec (settings, variables, command), which no event could carry. The run keeps the
        replicas and budget of the event: those an elastic job carries on without are not watched again."""
        if self.objects is None:
            self.build_objects(self.task.spec(), [str(part) for part in [*self.settings.command,
                                                                          *(self.settings.args or [])]])
        assert self.objects is not None
        return next(pod for pod in self.objects.pods if pod.metadata.name == name)

    def _with_dropped(self, rows: Sequence[ReplicaStatus]) -> tuple[ReplicaStatus, ...]:
        """The table's rows in plan order, with the last rows of the replicas the job carries on without."""
        if not self.dropped:
            return tuple(rows)
        by_name = {**self.dropped, **{row.name: row for row in rows}}
        return tuple(row for slot in self.slots if (row := by_name.get(slot.name)) is not None)

    def _clean_up_quietly(self, succeeded: bool = False, kill: bool = False) -> bool:
        """``clean_up``, its failure logged rather than raised (the task fails with what came before it); returns
        whether it was done."""
        try:
            self.clean_up(succeeded, kill=kill)
        except Exception as error:
            self.log.error("could not clean up job %s/%s: %s", self.namespace, self.name, error)
            return False
        return True

    def _defer(self) -> None:
        from airflow_distributed.triggers.kubernetes import DistributedJobTrigger

        deadline, timeout = deferral_deadline(self.settings, self.context)
        trigger = DistributedJobTrigger(
            job_name=self.name,
            namespace=self.namespace,
            replicas=slots_to_json([slot for slot in self.slots if slot.name not in self.dropped]),
            startup_timeout=self.settings.startup_timeout,
            queue_timeout=self.settings.queue_timeout,
            progress_timeout=self.settings.progress_timeout,
            started_at=time.time(),
            kubernetes_conn_id=self.settings.kubernetes_conn_id,
            execution_deadline=deadline,
            image_pull_grace=self.settings.image_pull_grace,
            watch_timings=watch_timings(self.settings).as_dict(),
            logging_interval=self.settings.logging_interval,
            log_cursor=self.log_cursor,
            # The replicas the job carries on without are no longer watched, but the final table shows them.
            resume_state={"framework": self.framework,
                          "elastic": asdict(self.elastic) if self.elastic is not None else None,
                          "dropped": [row.as_dict() for row in self.dropped.values()],
                          "earlier_runs": [asdict(run) for run in self.earlier_runs]},
        )
        self.log.info("job %s/%s: waiting in the triggerer", self.namespace, self.name)
        self.task.defer(trigger=trigger, method_name="execute_complete", timeout=timeout)

    def _emit(self, replica: str, line: str) -> None:
        """A followed replica's line into the task log; the master's live records (for the job view) left out."""
        if not is_record(line):
            self.log.info("[%s] %s", replica, line)

    def _log_table(self, rows: Sequence[ReplicaStatus]) -> None:
        self.log.info("replicas of %s:\n%s", self.name, replica_table(self._with_dropped(rows)))

    def _followed(self) -> list[str]:
        """The master, and the replicas ``log_replicas`` names (``all``, roles, ``role-index`` or pod names)."""
        setting = self.settings.log_replicas
        wanted = {setting} if isinstance(setting, str) else set(setting or ())
        names = [self.master.name]
        for slot in self.slots[1:]:
            if "all" in wanted or {slot.role, f"{slot.role}-{slot.index}", slot.name} & wanted:
                names.append(slot.name)
        if len(names) > MAX_FOLLOWED_LOGS:
            self.log.warning("following the logs of the first %d of %d replicas asked for", MAX_FOLLOWED_LOGS,
                             len(names))
        return names[:MAX_FOLLOWED_LOGS]

    # ------------------------------------------------------------------ finish

    def tail(self, replica: str, pods: Mapping[str, Any], container: str | None = None,
             lines: int = TAIL_LINES, timestamps: bool = False) -> list[str]:
        """A replica's last lines (with ``timestamps``: as read, timestamped, live records included); best effort: a
        log that cannot be read decides nothing."""
        from airflow_distributed.hooks.api_retry import KubernetesJobError
        from airflow_distributed.manifests.kubernetes import MAIN_CONTAINER

        if pods.get(replica) is None:
            return []
        try:
            read = self.hook.read_log_tail(self.namespace, replica, lines, container or MAIN_CONTAINER,
                                           timestamps=timestamps)
            return read if timestamps else without_records(read)
        except KubernetesJobError as error:
            self.log.warning("could not read the last lines of %s: %s", replica, error)
            return []

    def finish(self, outcome: JobOutcome, elapsed: float) -> dict[str, Any]:
        """Output, logs, clean-up, XCom; raises ``DistributedJobError`` unless the job succeeded."""
        ti = self.context["ti"]
        killed = outcome.ending == ending.STOPPED
        hung = outcome.ending == ending.HUNG  # deleted whole, as a kill: a hung job's pods hold their GPUs
        try:
            if hung:
                outcome = replace(outcome, logs=self.hung_logs(outcome))
            document, outcome = self._collect(outcome, killed or hung)
        except BaseException:
            # Whatever could not be read, the pods must not outlive the task.
            self._clean_up_quietly(outcome.succeeded, killed or hung)
            raise
        stopped = self.clean_up(outcome.succeeded, kill=killed or hung)
        statuses = _after_cleanup(self._with_dropped(outcome.replicas), stopped)
        self.log.info("replicas of %s (final):\n%s", self.name, replica_table(statuses))
        result = job_result(job_name=self.name, framework=self.framework, backend="kubernetes",
                            state="succeeded" if outcome.succeeded else "failed", document=document,
                            replicas=statuses, namespace=self.namespace)
        ti.xcom_push(key="job", value=job_record(result, document, dict(outcome.logs), elapsed,
                                                 self.usage(outcome.pods, elapsed)))
        if not outcome.succeeded:
            if self.elastic_failure:
                outcome = replace(outcome, ending=ending.GAVE_UP, reason=self.elastic_failure)
            note = "the job was deleted" if killed or hung else self.cleanup_note(False)
            raise job_failure(f"{self.namespace}/{self.name}", outcome, elapsed, note,
                              startup_timeout=self.settings.startup_timeout,
                              queue_timeout=self.settings.queue_timeout)
        return push_success(self.context, self.log, result, document, self.namespace, self.name, elapsed)

    def hung_logs(self, outcome: JobOutcome) -> dict[str, list[str]]:
        """The last lines of a hung job's replicas (the first ``HUNG_REPLICAS``), after asking each to print its
        Python stacks (pods/exec; the processes that imported ``tracking`` print them). A replica that could not
        be asked is said so in the task log, and its last lines are quoted all the same."""
        from airflow_distributed.jobstate.hang_watch import HUNG_REPLICAS
        from airflow_distributed.jobstate.outcome import HUNG_TAIL_LINES
        from airflow_distributed.manifests.kubernetes import MAIN_CONTAINER

        pods = outcome.pods
        names = [slot.name for slot in self.slots if slot.name not in self.dropped and pods.get(slot.name)][
            :HUNG_REPLICAS]
        self.hook.dump_stacks(self.namespace, names, MAIN_CONTAINER)
        return {name: self.tail(name, pods, lines=HUNG_TAIL_LINES) for name in names}

    def usage(self, pods: Mapping[str, Any], elapsed: float) -> dict[str, Any]:
        """What the job cost, from its pods' requests and start and end times (those replaced before included)."""
        now = time.time()
        runs = [*self.earlier_runs, *(pod_run(slot.name, pods.get(slot.name), now) for slot in self.slots
                                      if slot.name not in self.dropped)]
        return usage_over_tries(self.context, runs, elapsed, self.log)

    def _collect(self, outcome: JobOutcome, killed: bool) -> tuple[dict[str, Any], JobOutcome]:
        """The output document, and the outcome with the failed replica's last lines (or its pod's events) and the
        master's last lines added to its logs."""
        pods = outcome.pods
        document = self._document(pods) if not killed else _empty_document()
        logs = {name: list(lines) for name, lines in outcome.logs.items()}
        tail: list[str] = []
        events: list[str] = []
        if outcome.replica is not None:
            if outcome.ending == ending.EXITED:
                tail = logs[outcome.replica] = self.tail(outcome.replica, pods, outcome.container)
            elif outcome.ending in (ending.NOT_STARTED, ending.QUEUED) and pods.get(outcome.replica) is not None:
                events = self.hook.pod_events(self.namespace, outcome.replica)
        if not killed and self.master.name not in logs and log_available(pods.get(self.master.name)):
            logs[self.master.name] = self.tail(self.master.name, pods)
        return document, replace(outcome, tail=tuple(tail), events=tuple(events), logs=logs)

    def _document(self, pods: Mapping[str, Any]) -> dict[str, Any]:
        master = pods.get(self.master.name)
        document = parse_output_document(
            self.hook.read_output(self.namespace, master) if master is not None else None)
        if (warning := document_warning(document)) is not None:
            self.log.warning("%s", warning)
        return document

    def policy(self, succeeded: bool) -> str:
        return self.settings.clean_pod_policy or ("all" if succeeded else "running")

    def clean_up(self, succeeded: bool, kill: bool = False) -> bool:
        """Apply the clean-up policy (a kill deletes everything), then delete the job's Secrets whatever the policy;
        returns whether unfinished pods were deleted."""
        policy = "all" if kill else self.policy(succeeded)
        try:
            if policy == "all":
                self.hook.delete_job(self.namespace, self.name)
            elif policy == "running":
                self.hook.delete_unfinished_pods(self.namespace, self.name)
        finally:
            delete_secrets(self.hook, self.namespace, self.name)
        return policy != "none"

    def cleanup_note(self, succeeded: bool) -> str:
        return {
            "all": "the job was deleted",
            "running": "its pods still running were deleted; the finished ones are kept until the next try",
            "none": "its pods were left as they are (clean_pod_policy='none')",
        }[self.policy(succeeded)]


class _ResumableKubernetesJob(ResumableJobMixin):
    """``ResumableJobMixin`` around a ``KubernetesJobRun``: the job's identity goes to ``task_state_store``.

    Not an operator: the mixin's own ``__init__`` (operator argument defaults) does not apply.
    """

    external_id_key = STATE_KEY

    def __init__(self, run: KubernetesJobRun) -> None:
        self.run = run
        self.durable = True
        self.log = run.log
        self._result: dict[str, Any] | None = None

    def submit_job(self, context: Context) -> Any:
        return self.run.submit().as_id()

    def get_job_status(self, external_id: Any, context: Context) -> str:
        return self.run.status_of(external_id if isinstance(external_id, dict) else {})

    def is_job_active(self, status: str) -> bool:
        return status == "running"

    def is_job_succeeded(self, status: str) -> bool:
        return status == "succeeded"

    def poll_until_complete(self, external_id: Any, context: Context) -> Any:
        # The mixin returns this value itself when it reconnects, so it is the whole result.
        self._result = self.run.wait()
        return self._result

    def get_job_result(self, external_id: Any, context: Context) -> dict[str, Any]:
        if self._result is None:  # succeeded in an earlier try: collect it
            self._result = self.run.wait()
        return self._result


class KubernetesBackend:
    """``backend="kubernetes"``: one pod per replica and a headless Service, watched by the task."""

    name: ClassVar[str] = "kubernetes"

    def __init__(self) -> None:
        #: the job being waited for, for ``kill``
        self.current: KubernetesJobRun | None = None

    def _started(self, run: KubernetesJobRun) -> None:
        self.current = run

    def check(self, settings: BackendSettings, spec: TrainingSpec | None) -> list[tuple[str, str]]:
        return check_kubernetes_arguments(settings) + trainjob_only(settings, spec, self.name)

    def run(self, task: TaskCalls, settings: BackendSettings, context: Context, spec: TrainingSpec, job_name: str,
            command: Sequence[str]) -> dict[str, Any]:
        return run_kubernetes(task, settings, context, spec, job_name, command, on_start=self._started)

    def resume(self, task: TaskCalls, settings: BackendSettings, context: Context,
               event: dict[str, Any]) -> dict[str, Any]:
        return resume_kubernetes(task, settings, context, event, on_start=self._started)

    def kill(self) -> None:
        kill_kubernetes(self.current)


# ---------------------------------------------------------------------------------------------- helpers


def manifest_options(settings: BackendSettings, context: Context, namespace: str) -> Any:
    from airflow_distributed.manifests.kubernetes import JobManifestOptions, TaskInstanceRef

    deadline = None
    if settings.execution_timeout is not None:
        # A backstop for a worker that dies without a retry: the pods stop on their own after the task's time.
        deadline = math.ceil(settings.execution_timeout.total_seconds()) + DEADLINE_MARGIN_SECONDS
    return JobManifestOptions(
        namespace=namespace,
        image=settings.image or "",  # require_image has refused a job without one
        gpu_resource_key=settings.gpu_resource_key,
        task_instance=TaskInstanceRef.of(context["ti"]),
        model_volume=settings.model_volume,
        scheduler_name=settings.scheduler_name,
        gang_scheduling=settings.gang_scheduling,
        queue_name=settings.queue_name,
        active_deadline_seconds=deadline,
    )


def stacks_env(settings: BackendSettings) -> Mapping[str, str] | None:
    """The replicas' variables: with ``progress_timeout``, those on which ``tracking`` prints its process's stacks
    and notes its pid for the hang watchdog's exec."""
    if settings.progress_timeout is None:
        return settings.env
    from airflow_distributed.contract import ENV_STACKS_DIR, ENV_STACKS_SIGNAL
    from airflow_distributed.jobstate.hang_watch import STACKS_DIR, STACKS_SIGNAL

    return {**(settings.env or {}), ENV_STACKS_SIGNAL: STACKS_SIGNAL, ENV_STACKS_DIR: STACKS_DIR}


def delete_secrets(hook: DistributedTrainingHook, namespace: str, name: str) -> None:
    """Delete the Secrets of job ``name`` (its SSH key pair, its secret files) by name: the cascade from the Service
    does it only when the Service goes, which a clean-up policy that keeps pods does not do."""
    from airflow_distributed.manifests.kubernetes import job_secret_names

    hook.delete_secrets(namespace, job_secret_names(name))


def _elastic_of(spec: TrainingSpec) -> dict[str, int] | None:
    plan = elastic_plan(spec)
    return asdict(plan) if plan is not None else None


def _after_cleanup(rows: Sequence[ReplicaStatus], deleted: bool) -> tuple[ReplicaStatus, ...]:
    """Replicas still pending or running when their pods were deleted are ``stopped``."""
    if not deleted:
        return tuple(rows)
    return tuple(replace(row, state=STOPPED) if row.state in (PENDING, RUNNING) else row for row in rows)


def _run_from_json(row: Mapping[str, Any]) -> ReplicaRun:
    """A ``ReplicaRun`` back from the trigger's event (``asdict`` of it in ``resume_state``)."""
    return ReplicaRun(row["name"], Requests(**row["requests"]), row.get("started"), row.get("ended"))


def _empty_document() -> dict[str, Any]:
    return parse_output_document(None)


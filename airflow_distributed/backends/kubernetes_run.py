"""One job of ``backend="kubernetes"``: built, created (or reattached), waited for here or deferred, resumed, killed.

Reattach: job names are fixed per task instance, so a retry, or a worker restarted under the same task
instance, finds the job an earlier attempt created instead of creating a second one (``hook.ensure_job``).

Its end (output, last lines, clean-up, the ``job`` XCom) is ``kubernetes_finish``'s; an elastic job's restarts are
decided by ``kubernetes_elastic`` and made here, where the job's objects are. Run-time: it imports the hook, the
trigger and the manifests (so the Kubernetes clients) at its top; the backend (``kubernetes``) imports it when a job
runs.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import asdict, replace
from typing import TYPE_CHECKING, Any

from airflow_distributed.backends.job_options import manifest_options, watch_timings
from airflow_distributed.backends.job_run import (
    LIVE_JOB_XCOM_KEY,
    NOT_CLEANED_UP,
    TAIL_LINES,
    deferral_deadline,
    job_namespace,
    require_image,
    stacks_env,
)
from airflow_distributed.backends.kubernetes_elastic import ElasticRestarts
from airflow_distributed.backends.kubernetes_finish import KubernetesJobFinish, delete_secrets
from airflow_distributed.elastic import elastic_plan
from airflow_distributed.exceptions import error_class_named
from airflow_distributed.hooks.kubernetes import JobHandle, JobLook, PodJobHook
from airflow_distributed.hooks.pod_logs import task_log_lines
from airflow_distributed.jobstate.failures import job_failure
from airflow_distributed.jobstate.job_event import EventKind, JobEvent
from airflow_distributed.jobstate.log_cursor import strip_timestamps
from airflow_distributed.jobstate.outcome import Ending, JobOutcome
from airflow_distributed.jobstate.pod_state import log_available
from airflow_distributed.jobstate.replica_table import replica_table
from airflow_distributed.jobstate.startup import master_log_cursor
from airflow_distributed.jobstate.verdicts import JobVerdict, ReplicaSlot, replica_slots, slots_from_json, slots_to_json
from airflow_distributed.manifests.horovod_ssh import generate_ssh_key_pair
from airflow_distributed.manifests.kubernetes import POD_LAUNCH, build_job_objects, layout_for_kubernetes, with_owner
from airflow_distributed.manifests.pod_names import RESTARTS_ANNOTATION
from airflow_distributed.plan import KubernetesAddressing, build_plan
from airflow_distributed.replica.live_report import without_records
from airflow_distributed.status import ReplicaState
from airflow_distributed.triggers.kubernetes import DistributedJobTrigger
from airflow_distributed.triggers.log_relay import new_lines_after

if TYPE_CHECKING:
    from airflow.sdk import Context

    from airflow_distributed.backends.base import ForCluster, TaskCalls
    from airflow_distributed.manifests.kubernetes import JobObjects
    from airflow_distributed.plan import ClusterPlan
    from airflow_distributed.spec import TrainingSpec
    from airflow_distributed.status import ReplicaStatus

#: What ``status_of`` says of a job this task does not have (``ResumableJobMixin``: submit one).
ABSENT = "absent"
#: How many replicas' logs may be followed at once (one connection each).
MAX_FOLLOWED_LOGS = 32


class KubernetesJobRun(KubernetesJobFinish):
    """One job of one task instance: its plan, its hook, and the steps of its life."""

    def __init__(self, task: TaskCalls, settings: ForCluster, context: Context, namespace: str, name: str,
                 slots: Sequence[ReplicaSlot], framework: str, hook: PodJobHook) -> None:
        super().__init__(task, settings, context, namespace, name, slots, framework, hook)
        self.stopped = False
        #: the job's objects: built once per try (at start, or for an elastic restart after a deferral) and used for
        #: the create, a reattach and every pod an elastic job recreates
        self.objects: JobObjects | None = None
        self.handle: JobHandle | None = None
        #: what a retry's reconnect (``status_of``) read of its predecessor's job, for the reattach that follows
        self.look: JobLook | None = None
        #: where the trigger stopped relaying the master's log (``log_relay``): a trigger deferred again goes on there
        self.log_cursor: dict[str, Any] | None = None

    def new_hook(self) -> PodJobHook:
        return PodJobHook(kubernetes_conn_id=self.settings.options.kubernetes_conn_id, logger=self.log)

    @classmethod
    def start(cls, task: TaskCalls, settings: ForCluster, context: Context, spec: TrainingSpec, job_name: str,
              command: Sequence[str]) -> KubernetesJobRun:
        require_image(settings, "kubernetes")
        hook = PodJobHook(kubernetes_conn_id=settings.options.kubernetes_conn_id, logger=task.log)
        namespace = job_namespace(settings, hook, context["ti"].task_id)  # before anything is created
        run = cls(task, settings, context, namespace, job_name, (), spec.framework, hook)
        plan = run.build_objects(spec, command)  # a setting Kubernetes would refuse fails here, before any is created
        run.slots, run.elastic = tuple(replica_slots(plan)), ElasticRestarts(plan.elastic)
        return run

    def build_objects(self, spec: TrainingSpec, command: Sequence[str]) -> ClusterPlan:
        """The job's objects, built once, from the plan of this task instance's job (its name and namespace),
        which is returned."""
        settings = self.settings
        layout = layout_for_kubernetes(settings.model_dir, job_name=self.name, checkpoint_dir=settings.checkpoint_dir)
        program = self.task.replica_program(list(command), layout)
        plan = build_plan(spec, self.name, KubernetesAddressing(self.namespace), layout, program.command,
                          backend="kubernetes", launch=POD_LAUNCH, env=stacks_env(settings),
                          try_number=self.context["ti"].try_number, files=program.files,
                          secret_files=program.secret_files)
        # The connection names the sidecar's image as it does for the KubernetesPodOperator: a cluster that cannot
        # reach Docker Hub (the cncf provider's default image) needs one of its own registry.
        options = manifest_options(settings, self.context, self.namespace,
                                   xcom_sidecar_image=self.hook.get_xcom_sidecar_container_image() or None)
        # One key pair per job (its pods get the Service's uid through ``owned_by``, not a second build).
        ssh_key = generate_ssh_key_pair(f"airflow-distributed-{self.name}") if any(
            replica.command is None for replica in plan.replicas) else None
        self.objects = build_job_objects(plan, options, ssh_key=ssh_key)
        self.secrets = self.objects.secret_names()
        return plan

    @classmethod
    def resume(cls, task: TaskCalls, settings: ForCluster, context: Context,
               event: dict[str, Any]) -> KubernetesJobRun:
        """The run of a job after a deferral, from the trigger's event: its replicas, framework and elastic budget
        ride along in it, so the spec is not parsed again (see ``_defer``)."""
        hook = PodJobHook(kubernetes_conn_id=settings.options.kubernetes_conn_id, logger=task.log)
        fired = JobEvent.from_payload(event)
        state = dict(fired.resume_state) if fired.resume_state is not None else None
        if state is None:  # a trigger deferred by a release that did not hand them back: the spec has them
            spec = task.spec()
            plan = elastic_plan(spec)
            state = {"framework": spec.framework, "elastic": asdict(plan) if plan is not None else None}
        elastic = ElasticRestarts.of_state(state)
        # The trigger watched the replicas the job still has; those it carries on without (workers, never the
        # master) go back among the job's slots, in plan order, for the final table.
        slots = sorted([*slots_from_json(fired.replicas or ()),
                        *(ReplicaSlot(row.name, row.role, row.index) for row in elastic.dropped.values())],
                       key=lambda slot: (not slot.is_master, slot.role, slot.index))
        run = cls(task, settings, context, str(fired.namespace), str(fired.job_name), slots, state["framework"], hook)
        run.elastic = elastic
        run.log_cursor = dict(fired.log_cursor) if fired.log_cursor is not None else None
        if state.get("secrets") is not None:
            run.secrets = tuple(state["secrets"])
        return run

    # ------------------------------------------------------------------ submit, state, wait

    def submit(self) -> JobHandle:
        started = time.monotonic()
        assert self.objects is not None
        look, self.look = self.look, None  # a reconnect's look, just made: used once
        handle = self.hook.ensure_job(self.namespace, self.objects, self.slots, stopped=lambda: self.stopped,
                                      look=look)
        self.handle = handle
        if handle.reattached is None:
            self.log.info("job %s/%s: %s with %d replicas created (%d objects) in %.1fs", self.namespace, self.name,
                          self.framework, len(self.slots), handle.created, time.monotonic() - started)
        return handle

    def status_of(self, external_id: dict[str, Any]) -> str:
        """``running``, ``succeeded``, ``failed`` (``ReplicaState``) or ``absent`` (for ``ResumableJobMixin``)."""
        namespace, name = external_id.get("namespace"), external_id.get("name")
        if (namespace, name) != (self.namespace, self.name):
            return ABSENT  # another namespace or name since: not this task's job any more
        look = self.look = self.hook.look_at_job(self.namespace, self.name)  # the submit that follows takes it
        if look.pods is None:
            return ABSENT
        verdict = self.hook.job_verdict(self.namespace, self.name, self.slots, pods=look.pods)
        if verdict is None:
            return ReplicaState.RUNNING
        return verdict.state

    def wait(self) -> dict[str, Any]:
        """Wait here (or defer) for the verdict, then finish. The job exists (``submit`` or reattach)."""
        if self.handle is None:
            # Reconnecting through task_state_store: make sure of the job (and create any pod it lacks).
            self.submit()
        # Lets the job view find the running job's pods before there is a final record.
        self.context["ti"].xcom_push(key=LIVE_JOB_XCOM_KEY, value={
            "job_name": self.name, "namespace": self.namespace,
            "kubernetes_conn_id": self.settings.options.kubernetes_conn_id, "framework": self.framework,
        })
        if self.settings.deferrable and self.handle.reattached != ReplicaState.SUCCEEDED:  # type: ignore[union-attr]
            self._defer()
        # Each followed log's place, across the waits of an elastic job: no line twice after a pod is recreated.
        log_cursors = self.log_cursors
        try:
            while True:
                outcome = self.hook.wait_for_job(
                    self.namespace, self.name, self.elastic.watched(self.slots),
                    startup_timeout=self.settings.startup_timeout,
                    queue_timeout=self.settings.options.queue_timeout,
                    image_pull_grace=self.settings.options.image_pull_grace,
                    watch_timings=watch_timings(self.settings),
                    on_change=self._log_table,
                    stopped=lambda: self.stopped,
                    follow=self._followed(),
                    emit=task_log_lines(self.log),
                    log_cursors=log_cursors,
                    progress_timeout=self.settings.progress_timeout,
                )
                if not self._after_failure(outcome):
                    break
        except BaseException:
            # The wait itself failed (API gone, execution_timeout): no verdict, but no pod may keep running.
            self.clean_up_quietly()
            raise
        return self.finish(outcome, time.monotonic() - self.started)

    def complete(self, event: dict[str, Any]) -> dict[str, Any]:
        """``execute_complete``: the trigger's verdict -> output, logs, clean-up and XCom, as in the synchronous
        wait."""
        fired = JobEvent.from_payload(event)
        elapsed = max(0.0, time.time() - float(fired.started_at or time.time()))
        if fired.ended:
            try:
                tracker = self.hook.job_tracker(self.namespace, self.name, self.slots)
            except BaseException:
                self.clean_up_quietly()
                raise
            verdict = fired.verdict or JobVerdict(ReplicaState(fired.kind))
            pods = tracker.last_pods()
            outcome = verdict.outcome(tracker.statuses(), pods=pods)
            if not verdict.succeeded:
                # Defers again if it restarts one (or carries on without it): the master's lines are shown once, at
                # the end, not at every resume.
                self._restart_after_deferral(outcome)
            master = pods.get(self.master.name)
            stamped = self.tail(self.master.name, pods, timestamps=True) if log_available(master) else []
            # The trigger showed the master's lines as they came (``log_relay``): only those after its last relay.
            cursor = dict(fired.log_cursor) if fired.log_cursor is not None else None
            for line in new_lines_after(cursor, ((master or {}).get("metadata") or {}).get("uid"), stamped):
                self.log.info("[%s] %s", self.master.name, line)
            self._note_master_log(cursor, master, stamped)
            tail = without_records(strip_timestamps(stamped))
            return self.finish(replace(outcome, logs={self.master.name: tail}), elapsed)
        # timeout (execution_timeout reached in the triggerer) or error (the trigger could not watch): clean up,
        # fail. A timeout ends the job as the synchronous wait's does, as a kill: the whole job is deleted, not kept.
        # The trigger's error is the one to fail with, as the synchronous wait's is: nothing is read first, and a
        # clean-up that fails is logged (after a refused watch every request may be refused: the task's rights were
        # taken away).
        timed_out = fired.kind == EventKind.TIMEOUT
        cleaned = self.clean_up_quietly(kill=timed_out)
        note = ("the job was deleted" if timed_out else self.cleanup_note(False)) if cleaned else NOT_CLEANED_UP
        outcome = JobOutcome(Ending.TIMED_OUT if timed_out else Ending.FAILED, message=fired.text)
        raise job_failure(f"{self.namespace}/{self.name}", outcome, elapsed, note,
                          default=error_class_named(fired.error_class))

    def _note_master_log(self, relayed: dict[str, Any] | None, master: Any, stamped: Sequence[str]) -> None:
        """Where the master's first line and first progress record were, for the startup phases
        (``master_log_cursor``: the trigger's relay, else its last lines when they are its whole log)."""
        uid = str(((master or {}).get("metadata") or {}).get("uid") or "")
        self.log_cursors[self.master.name] = (uid, master_log_cursor(relayed, uid, stamped, TAIL_LINES))

    def kill(self) -> None:
        """``on_kill``: stop waiting and delete the job (its Service; the pods go by cascade)."""
        self.stopped = True
        self.log.info("task killed: deleting job %s/%s", self.namespace, self.name)
        try:
            # A hook of its own: the waiting one may be in the middle of a request on this very thread.
            hook = self.new_hook()
            hook.delete_job(self.namespace, self.name)
            delete_secrets(hook, self.namespace, self.name, self.secrets)
        except Exception as error:
            self.log.error("could not delete job %s/%s: %s; delete its Service by hand", self.namespace, self.name,
                           error)

    # ------------------------------------------------------------------ elastic restarts

    def _after_failure(self, outcome: JobOutcome) -> bool:
        """An elastic job's answer to a replica that ended badly: its pod recreated, or the job carries on without
        it (``True``: wait again), or the job fails (``False``)."""
        if self.handle is None:
            return False
        return self.elastic.after_failure(outcome, self.slots, self.log, self._recreate)

    def _restart_after_deferral(self, outcome: JobOutcome) -> None:
        """After a deferral: an elastic job's lost replica is recreated as in the synchronous wait, and the task
        defers again; a decision to fail is left on ``elastic`` for the failure message."""
        if self.elastic.plan is None:
            return
        service = self.hook.get_service(self.namespace, self.name)
        if service is None:
            return
        self.handle = JobHandle(self.namespace, self.name, service["metadata"]["uid"])
        if self._after_failure(outcome):
            self._defer()

    def _recreate(self, slot: ReplicaSlot, restarts: int) -> None:
        """Replica ``slot``'s pod again, under the same name (so the same address), its restarts counted."""
        assert self.handle is not None
        # A copy of the pod and its metadata: the job's objects stay as they were built.
        pod = with_owner(self._pod_manifest(slot.name), self.name, self.handle.uid)
        pod.metadata.annotations = {**(pod.metadata.annotations or {}), RESTARTS_ANNOTATION: str(restarts + 1)}
        self.hook.recreate_pod(self.namespace, pod)

    def _pod_manifest(self, name: str) -> Any:
        """The pod of replica ``name`` as the job's objects have it. After a deferral they are built again, once:
        a pod needs the whole spec (settings, variables, command), which no event could carry. The run keeps the
        replicas and budget of the event: those an elastic job carries on without are not watched again."""
        if self.objects is None:
            self.build_objects(self.task.spec(), [str(part) for part in [*self.settings.command,
                                                                          *(self.settings.args or [])]])
        assert self.objects is not None
        return next(pod for pod in self.objects.pods if pod.metadata.name == name)

    # ------------------------------------------------------------------ deferral, the task log

    def _defer(self) -> None:
        deadline, timeout = deferral_deadline(self.settings, self.context)
        trigger = DistributedJobTrigger(
            job_name=self.name,
            namespace=self.namespace,
            replicas=slots_to_json(self.elastic.watched(self.slots)),
            startup_timeout=self.settings.startup_timeout,
            queue_timeout=self.settings.options.queue_timeout,
            progress_timeout=self.settings.progress_timeout,
            started_at=time.time(),
            kubernetes_conn_id=self.settings.options.kubernetes_conn_id,
            execution_deadline=deadline,
            image_pull_grace=self.settings.options.image_pull_grace,
            watch_timings=watch_timings(self.settings).as_dict(),
            logging_interval=self.settings.options.logging_interval,
            log_cursor=self.log_cursor,
            resume_state={"framework": self.framework, **self.elastic.state(),
                          "secrets": list(self.secrets) if self.secrets is not None else None},
        )
        self.log.info("job %s/%s: waiting in the triggerer", self.namespace, self.name)
        self.task.defer(trigger=trigger, method_name="execute_complete", timeout=timeout)

    def _log_table(self, rows: Sequence[ReplicaStatus]) -> None:
        self.log.info("replicas of %s:\n%s", self.name, replica_table(self.elastic.with_dropped(rows, self.slots)))

    def _followed(self) -> list[str]:
        """The master, and the replicas ``log_replicas`` names (``all``, roles, ``role-index`` or pod names)."""
        setting = self.settings.options.log_replicas
        wanted = {setting} if isinstance(setting, str) else set(setting or ())
        names = [self.master.name]
        for slot in self.slots[1:]:
            if "all" in wanted or {slot.role, f"{slot.role}-{slot.index}", slot.name} & wanted:
                names.append(slot.name)
        if len(names) > MAX_FOLLOWED_LOGS:
            self.log.warning("following the logs of the first %d of %d replicas asked for", MAX_FOLLOWED_LOGS,
                             len(names))
        return names[:MAX_FOLLOWED_LOGS]


__all__ = ["MAX_FOLLOWED_LOGS", "KubernetesJobRun"]

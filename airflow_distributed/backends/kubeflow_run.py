"""One job of ``backend="kubeflow"``: a Kubeflow Training Operator v1 object, built, submitted (or reattached),
waited for here or deferred, finished and killed (``KubeflowJobRun``); ``trainjob_run`` runs a TrainJob the same way.

Run-time: it imports the hook, the trigger and the manifests (so the Kubernetes clients) at its top; the backend
(``kubeflow``) imports it when a job runs. Clean-up and reattach are described in ``kubeflow``.
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from dataclasses import replace
from typing import TYPE_CHECKING, Any, ClassVar, Literal

from airflow_distributed.backends.job_end import end_job, read_document
from airflow_distributed.backends.job_options import manifest_options, watch_timings
from airflow_distributed.backends.job_run import (
    NOT_CLEANED_UP,
    TAIL_LINES,
    clean_pod_policy,
    deferral_deadline,
    job_namespace,
    last_try,
    require_image,
    stacks_env,
)
from airflow_distributed.backends.job_usage import usage_over_tries
from airflow_distributed.exceptions import KubernetesJobError, error_class_named
from airflow_distributed.hooks.kubeflow import KubeflowHandle, KubeflowJobHook
from airflow_distributed.hooks.pod_logs import task_log_lines
from airflow_distributed.jobstate.disruption import TakenAway
from airflow_distributed.jobstate.failures import job_failure
from airflow_distributed.jobstate.hang_watch import HUNG_REPLICAS
from airflow_distributed.jobstate.job_event import EventKind, JobEvent
from airflow_distributed.jobstate.kubeflow_pods import failed_replica, lost_replica
from airflow_distributed.jobstate.log_cursor import LogCursor
from airflow_distributed.jobstate.object_wait import status_outcome
from airflow_distributed.jobstate.outcome import HUNG_TAIL_LINES, Ending, JobOutcome
from airflow_distributed.jobstate.pending_pods import OWN_VERDICTS
from airflow_distributed.jobstate.startup import (
    admitted_at,
    custom_job_unknown,
    epoch,
    first_moments,
    job_startup,
    pod_startup,
)
from airflow_distributed.jobstate.usage import pod_run
from airflow_distributed.jobstate.verdicts import JobVerdict
from airflow_distributed.manifests.kubeflow import (
    KUBEFLOW_LAUNCH,
    KubeflowAddressing,
    KubeflowJobOptions,
    build_kubeflow_job,
)
from airflow_distributed.manifests.kubeflow_kinds import KubeflowResource, kubeflow_resource
from airflow_distributed.manifests.kubernetes import layout_for_kubernetes
from airflow_distributed.plan import Addressing, ClusterPlan, build_plan
from airflow_distributed.replica.live_report import without_records
from airflow_distributed.status import ReplicaState
from airflow_distributed.triggers.kubeflow import KubeflowJobTrigger

if TYPE_CHECKING:
    from airflow.sdk import Context

    from airflow_distributed.backends.base import ForCluster, TaskCalls
    from airflow_distributed.launch import Launch
    from airflow_distributed.spec import TrainingSpec


class KubeflowJobRun:
    """One Kubeflow job of one task instance: its object, its hook, and the steps of its life."""

    backend = "kubeflow"
    #: How the kind's controller starts the replicas (the facts the frameworks read from the plan).
    launch: ClassVar[Launch] = KUBEFLOW_LAUNCH
    #: What runs the submitted object in the cluster (for the log).
    controller = "the Kubeflow Training Operator"
    #: ``fieldValidation`` of the create (``None``: the server's default, ``Warn``).
    field_validation: str | None = None
    #: The hook and the trigger of the kind: a run of another kind names its own.
    hook_class: ClassVar[type[KubeflowJobHook]] = KubeflowJobHook
    trigger_class: ClassVar[type[KubeflowJobTrigger]] = KubeflowJobTrigger

    def __init__(self, task: TaskCalls, settings: ForCluster, context: Context, hook: KubeflowJobHook,
                 namespace: str, name: str, framework: str, started_at: float | None = None) -> None:
        self.task, self.settings, self.context, self.hook = task, settings, context, hook
        self.namespace, self.name, self.framework = namespace, name, framework
        self.resource: KubeflowResource = self.resource_of(framework)
        self.log = task.log
        self.body: dict[str, Any] | None = None
        self.stopped = False
        self.started_at = started_at if started_at is not None else time.time()
        #: where the master's log was followed (sync) or relayed (deferred), by its pod's uid: its first line and
        #: first progress record are startup phases
        self.log_cursors: dict[str, LogCursor] = {}
        #: the pods the cluster was seen taking away during the wait (sync) or in the triggerer (deferred): the
        #: replica lost, when its pod is gone by the time the controller judges the job
        self.taken = TakenAway()

    @staticmethod
    def resource_of(framework: str) -> KubeflowResource:
        return kubeflow_resource(framework)

    def elapsed(self) -> float:
        return max(0.0, time.time() - self.started_at)

    def new_hook(self) -> KubeflowJobHook:
        return self.hook_class(kubernetes_conn_id=self.settings.options.kubernetes_conn_id, logger=self.log)

    @classmethod
    def start(cls, task: TaskCalls, settings: ForCluster, context: Context, spec: TrainingSpec, job_name: str,
              command: Sequence[str]) -> KubeflowJobRun:
        require_image(settings, cls.backend)
        hook = cls.hook_class(kubernetes_conn_id=settings.options.kubernetes_conn_id, logger=task.log)
        namespace = job_namespace(settings, hook, context["ti"].task_id)  # before anything is created
        layout = layout_for_kubernetes(settings.model_dir, job_name=job_name, checkpoint_dir=settings.checkpoint_dir)
        program = task.replica_program(list(command), layout)
        plan = build_plan(spec, job_name, cls.addressing(namespace, spec.framework), layout, program.command,
                          backend=cls.backend, launch=cls.launch, env=stacks_env(settings),
                          try_number=context["ti"].try_number, files=program.files, secret_files=program.secret_files)
        run = cls(task, settings, context, hook, namespace, job_name, spec.framework)
        run.body = run.build(plan, spec)  # a setting the kind's pod templates cannot hold fails here
        return run

    @staticmethod
    def addressing(namespace: str, framework: str) -> Addressing:
        """Where the kind's controller puts each replica (its Services' names)."""
        return KubeflowAddressing(namespace, framework)

    def build(self, plan: ClusterPlan, spec: TrainingSpec) -> dict[str, Any]:
        """The object to submit (pure)."""
        # "All" would let the Kubeflow operator delete the master's pod (and its output) before it is read.
        pod_policy: Literal["none", "running"] = (
            "none" if self.settings.options.clean_pod_policy == "none" else "running")
        options = KubeflowJobOptions(manifest_options(self.settings, self.context, self.namespace),
                                     clean_pod_policy=pod_policy)
        return build_kubeflow_job(plan, options)

    @classmethod
    def resume(cls, task: TaskCalls, settings: ForCluster, context: Context,
               event: dict[str, Any]) -> KubeflowJobRun:
        hook = cls.hook_class(kubernetes_conn_id=settings.options.kubernetes_conn_id, logger=task.log)
        fired = JobEvent.from_payload(event)
        state = fired.resume_state
        # The framework rides along in the event (see ``defer``); a trigger deferred by a release that did not hand
        # it back leaves it to the spec.
        framework = state["framework"] if state is not None else task.spec().framework
        run = cls(task, settings, context, hook, str(fired.namespace), str(fired.job_name), framework,
                  started_at=fired.started_at)
        relayed = fired.log_cursor  # where the trigger relayed the master's log: its first line among it
        if isinstance(relayed, Mapping) and relayed.get("uid"):
            run.log_cursors[str(relayed["uid"])] = LogCursor.from_dict(relayed)
        run.taken = TakenAway.from_dict(fired.taken_away)
        return run

    # ------------------------------------------------------------------ submit, wait

    def submit(self) -> KubeflowHandle:
        handle = self.hook.submit_kubeflow_job(self.namespace, self.resource, self.body or {},
                                               field_validation=self.field_validation)
        if handle.reattached is None:
            self.log.info("job %s/%s: %s submitted to %s", self.namespace, self.name, self.resource.kind,
                          self.controller)
        return handle

    def wait(self) -> dict[str, Any]:
        try:
            outcome = self.hook.wait_for_kubeflow_job(
                self.namespace, self.resource, self.name, stopped=lambda: self.stopped,
                watch_timings=watch_timings(self.settings), image_pull_grace=self.settings.options.image_pull_grace,
                queue_timeout=self.settings.options.queue_timeout, progress_timeout=self.settings.progress_timeout,
                on_change=lambda status: self.log.info("%s %s/%s is %s%s", self.resource.kind, self.namespace,
                                                       self.name, status.state,
                                                       f": {status.message}" if status.message else ""),
                on_object=self.observed,
                emit=task_log_lines(self.log),  # the master's lines, as they come
                log_cursors=self.log_cursors,
                taken=self.taken,
            )
        except BaseException:
            # The wait itself failed (API gone, execution_timeout): nobody would watch the job any more.
            self.delete_quietly()
            raise
        return self.finish(outcome)

    def observed(self, obj: dict[str, Any]) -> None:
        """The object, whenever its status changed during the synchronous wait (a kind may publish it)."""

    def defer(self) -> None:
        deadline, timeout = deferral_deadline(self.settings, self.context)
        trigger = self.trigger_class(job_name=self.name, namespace=self.namespace, group=self.resource.group,
                                     version=self.resource.version, plural=self.resource.plural,
                                     kubernetes_conn_id=self.settings.options.kubernetes_conn_id,
                                     execution_deadline=deadline, delete_on_kill=True, started_at=self.started_at,
                                     watch_timings=watch_timings(self.settings).as_dict(),
                                     image_pull_grace=self.settings.options.image_pull_grace,
                                     logging_interval=self.settings.options.logging_interval,
                                     queue_timeout=self.settings.options.queue_timeout,
                                     progress_timeout=self.settings.progress_timeout,
                                     resume_state={"framework": self.framework})
        self.log.info("job %s/%s: waiting in the triggerer", self.namespace, self.name)
        self.task.defer(trigger=trigger, method_name="execute_complete", timeout=timeout)

    def complete(self, event: dict[str, Any]) -> dict[str, Any]:
        """``execute_complete``: the trigger's event -> output, clean-up and XCom, as in the synchronous wait."""
        fired = JobEvent.from_payload(event)
        if fired.kind == EventKind.FAILED and fired.reason in OWN_VERDICTS:
            # The trigger's own verdict: the job's status does not show it, so it is not read back.
            verdict = fired.verdict or JobVerdict(ReplicaState.FAILED, cause=Ending.IMAGE)
            obj = self.hook.get_kubeflow_job(self.namespace, self.resource, self.name)
            return self.finish(verdict.outcome(job_object=obj))
        if fired.ended:
            obj = self.hook.get_kubeflow_job(self.namespace, self.resource, self.name)
            return self.finish(status_outcome(self.hook.kind.status_of(obj), obj) if obj is not None
                               else JobOutcome(Ending.DELETED))
        if fired.kind == EventKind.DELETED:
            return self.finish(JobOutcome(Ending.DELETED))
        # timeout (execution_timeout in the triggerer) or error (the trigger could not watch): the job must go.
        deleted = self.delete_quietly()
        outcome = JobOutcome(Ending.TIMED_OUT if fired.kind == EventKind.TIMEOUT else Ending.FAILED,
                             message=fired.text)
        raise job_failure(f"{self.namespace}/{self.name}", outcome, self.elapsed(),
                          "the job was deleted" if deleted else NOT_CLEANED_UP,
                          default=error_class_named(fired.error_class))

    def kill(self) -> None:
        """``on_kill``: stop waiting and delete the job object (the Kubeflow operator's pods go with it)."""
        self.stopped = True
        self.log.info("task killed: deleting %s %s/%s", self.resource.kind, self.namespace, self.name)
        try:
            # A hook of its own: the waiting one may be in the middle of a request on this very thread.
            self.new_hook().delete_kubeflow_job(self.namespace, self.resource, self.name)
        except Exception as error:
            self.log.error("could not delete %s %s/%s: %s; delete it by hand", self.resource.kind, self.namespace,
                           self.name, error)

    # ------------------------------------------------------------------ finish

    def finish(self, outcome: JobOutcome) -> dict[str, Any]:
        """Output, clean-up, XCom; raises ``DistributedJobError`` unless the job succeeded."""
        elapsed = self.elapsed()
        job = f"{self.namespace}/{self.name}"
        if outcome.ending == Ending.STOPPED:
            self.delete_quietly()
            raise job_failure(job, outcome, elapsed, "the job was deleted")
        succeeded = outcome.succeeded
        obj = dict(outcome.job_object) if outcome.job_object is not None else None
        try:
            pods = self.hook.kubeflow_pods(self.namespace, obj) if obj is not None else []
            container = self.hook.main_container(obj) if obj is not None else ""
            document = self._document(obj)
            found = None
            if outcome.ending == Ending.FAILED:
                # A pod taken away is often deleted before its controller marks the job failed: as last seen.
                gone = self.taken.gone(pods)
                found = failed_replica([*gone, *pods], container) or lost_replica(gone)
            if found is not None:  # the controller's words, and the replica whose end they are about
                outcome = found.outcome(judgement=outcome.judgement, job_object=obj)
            logs = self.hung_logs(pods, container) if outcome.ending == Ending.HUNG else self._tails(
                pods, container, outcome)
        except BaseException:
            self.delete_quietly()
            raise
        statuses = self.hook.replica_statuses(pods, container)
        deleted = self.clean_up(succeeded, exists=obj is not None, unfinished=outcome.ending in (
            Ending.IMAGE, Ending.QUEUED, Ending.HUNG))
        if not succeeded:
            outcome = replace(outcome, replicas=statuses, tail=tuple(logs.get(outcome.replica or "", ())), logs=logs)
        now = time.time()
        runs = [pod_run(pod["metadata"]["name"], pod, now) for pod in pods]
        return end_job(self.context, self.log, name=self.name, framework=self.framework, backend=self.backend,
                       outcome=outcome, document=document, replicas=statuses, logs=logs, elapsed=elapsed,
                       namespace=self.namespace, usage=usage_over_tries(self.context, runs, elapsed, self.log),
                       startup=self.startup(obj, pods, container),
                       cleanup="the job was deleted" if deleted else self._kept_note(),
                       queue_timeout=self.settings.options.queue_timeout)

    def startup(self, obj: dict[str, Any] | None, pods: list[dict[str, Any]], container: str) -> dict[str, Any]:
        """The job's startup phases from the object and the pods its end lists anyway (no request of its own): from
        the object's creation, its admission (its ``Suspended`` condition turned false), each pod's times, and the
        master's first line and progress record where its log was followed or relayed."""
        if obj is None:
            return {}
        admitted = admitted_at(obj)
        master = self.hook.master_pod(obj, pods)
        replicas = []
        for pod in pods:
            cursor = self.log_cursors.get(str(pod["metadata"].get("uid") or ""))
            firsts = first_moments([("", cursor)])[""] if cursor is not None else (None, None)
            replicas.append(pod_startup(pod["metadata"]["name"], pod, container=container, admitted=admitted,
                                        first_line=firsts[0], first_report=firsts[1]))
        return job_startup(replicas, master=None if master is None else master["metadata"]["name"],
                           unknown=custom_job_unknown(admitted),
                           created=epoch((obj.get("metadata") or {}).get("creationTimestamp")))

    def _document(self, obj: dict[str, Any] | None) -> dict[str, Any]:
        return read_document(self.hook.kubeflow_output(self.namespace, obj) if obj is not None else None, self.log)

    def _tails(self, pods: list[dict[str, Any]], container: str, outcome: JobOutcome) -> dict[str, list[str]]:
        """The last lines of the replica that failed the job, best effort: a log that cannot be read decides
        nothing."""
        logs: dict[str, list[str]] = {}
        if outcome.ending not in (Ending.EXITED, Ending.POD_FAILED):
            return logs
        for pod in pods:
            name = pod["metadata"]["name"]
            if name == outcome.replica:
                try:
                    logs[name] = without_records(self.hook.read_log_tail(self.namespace, name, TAIL_LINES, container))
                except KubernetesJobError as error:
                    self.log.warning("could not read the last lines of %s: %s", name, error)
        return logs

    def hung_logs(self, pods: list[dict[str, Any]], container: str) -> dict[str, list[str]]:
        """The last lines of a hung job's replicas (the first ``HUNG_REPLICAS``), after asking each to print its
        Python stacks over pods/exec (the processes that imported ``tracking`` print them), as on the kubernetes
        backend. A replica that could not be asked is said so in the task log, and its lines quoted all the same."""
        names = [row.name for row in self.hook.replica_statuses(pods, container)][:HUNG_REPLICAS]
        self.hook.dump_stacks(self.namespace, names, container)
        logs: dict[str, list[str]] = {}
        for name in names:
            try:
                logs[name] = self.hook.read_log_tail(self.namespace, name, HUNG_TAIL_LINES, container)
            except KubernetesJobError as error:
                self.log.warning("could not read the last lines of %s: %s", name, error)
        return logs

    def clean_up(self, succeeded: bool, exists: bool = True, unfinished: bool = False) -> bool:
        """Delete the job object when ``clean_pod_policy`` (default: ``all`` after success) says so, or when the
        job failed by this task's verdict while the Kubeflow operator still runs it (``unfinished``)."""
        policy = clean_pod_policy(self.settings, succeeded, self.context)
        if (policy != "all" and not unfinished) or not exists:
            return False
        self.hook.delete_kubeflow_job(self.namespace, self.resource, self.name)
        return True

    def _kept_note(self) -> str:
        """Why a failed job's object is still there: for the next try to look at, or as the user asked."""
        if last_try(self.context):
            return (f"the job is kept, as clean_pod_policy={self.settings.options.clean_pod_policy!r} asks: delete "
                    "it when done with it")
        return "the job is kept for a look until the next try"

    def delete_quietly(self) -> bool:
        """Delete the job object, a failure logged rather than raised; returns whether it was done."""
        try:
            self.new_hook().delete_kubeflow_job(self.namespace, self.resource, self.name)
        except Exception as error:
            self.log.error("could not delete %s %s/%s: %s", self.resource.kind, self.namespace, self.name, error)
            return False
        return True


__all__ = ["KubeflowJobRun"]

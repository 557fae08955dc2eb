"""``DistributedJobSensor``: wait for a distributed training job that something else started.

Two kinds of job:

- a job of the ``kubernetes`` backend (``DistributedTrainingOperator(wait_for_completion=False)``, which pushes
  ``job_name`` and ``namespace`` to XCom) or any set of pods with the project's labels: its pods are found by the
  ``airflow-distributed/job`` label and judged by ``job_watch`` like the operator's own wait (the master's main
  container exiting 0 succeeds; any replica exiting non-zero, or failing to start for good, fails);
- a Kubeflow ``TFJob``/``PyTorchJob``/``MXJob``/``MPIJob``/``XGBoostJob``/``PaddleJob`` (``kind=``): its
  ``status.conditions`` (``kubeflow_status.job_status``), and the output document of the replica its framework's
  success rule names; while some replica has not started, its pods too, for an image that cannot be pulled
  (the job's own status never says so).

On success the sensor pushes ``metrics`` and ``model_path`` (and returns the operator's ``return_value``); on
failure it raises ``AirflowFailException`` naming the replica and the reason: a job that failed is not retried,
and ``soft_fail`` skips instead, as with Airflow's own sensors. ``timeout``, ``poke_interval``, ``mode`` and
``soft_fail`` are ``BaseSensorOperator``'s; ``deferrable=True`` waits in the triggerer.

Importing this module is cheap (a DAG file does): the hooks and triggers a poke reads the job with (``job_reads``,
the Kubernetes clients) are imported at a poke, in ``_reads``.
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from datetime import timedelta
from typing import TYPE_CHECKING, Any

from airflow.providers.common.compat.sdk import conf
from airflow.sdk import BaseSensorOperator, PokeReturnValue
from airflow.sdk.exceptions import AirflowException, AirflowFailException, AirflowSensorTimeout, AirflowSkipException

from airflow_distributed.contract import ENV_FRAMEWORK
from airflow_distributed.frameworks import all_frameworks
from airflow_distributed.jobstate.job_event import EventKind, JobEvent
from airflow_distributed.jobstate.job_watch import JobTracker
from airflow_distributed.jobstate.log_cursor import parse_timestamp_ns
from airflow_distributed.jobstate.pod_state import image_failure, pod_started
from airflow_distributed.jobstate.replica_table import replica_table
from airflow_distributed.jobstate.verdicts import ReplicaSlot, slots_to_json
from airflow_distributed.jobstate.watch_timings import WatchTimings
from airflow_distributed.manifests.kubeflow_kinds import KINDS
from airflow_distributed.manifests.kubeflow_status import success_rule
from airflow_distributed.manifests.pod_names import INDEX_LABEL, MAIN_CONTAINER, MASTER_LABEL, ROLE_LABEL
from airflow_distributed.outputs import document_warning, job_result, parse_output_document
from airflow_distributed.status import ReplicaState

if TYPE_CHECKING:
    from airflow.sdk import Context

    from airflow_distributed.hooks.kube_api import KubeApiHook
    from airflow_distributed.hooks.kubeflow import KubeflowJobHook
    from airflow_distributed.hooks.kubernetes import PodJobHook
    from airflow_distributed.sensors.job_reads import JobReads

#: Kubeflow kind -> framework, from the kinds' table (``kubeflow_kinds.KINDS``), in the frameworks' order (the order
#: the sensors' messages list the kinds in).
KIND_FRAMEWORK: dict[str, str] = {KINDS[fw.name].kind: fw.name for fw in all_frameworks() if fw.name in KINDS}
#: Kubeflow Trainer v2's one kind; any framework with a Trainer runtime (TensorFlow and MXNet have none).
TRAINJOB_KIND = "TrainJob"
_NO_TRAINER_RUNTIME = frozenset(fw.name for fw in all_frameworks() if fw.no_trainer_runtime)
#: A startup window no job reaches: a sensor judges a job's end, not how long its pods take to start.
_NO_STARTUP_LIMIT = 10.0**9


class DistributedJobSensor(BaseSensorOperator):
    """Wait for a distributed training job to finish; push its ``metrics`` and ``model_path`` on success.

    :param job_name: the job: the ``airflow-distributed/job`` label of its pods, or the Kubeflow object's name,
        e.g. ``"{{ ti.xcom_pull(task_ids='train', key='job_name') }}"``. (templated)
    :param namespace: its namespace; default: the connection's ``namespace`` extra, else ``default``. (templated)
    :param kind: ``None`` for a job of the ``kubernetes`` backend (pods with the project's labels); ``TFJob``,
        ``PyTorchJob``, ``MXJob``, ``MPIJob``, ``XGBoostJob`` or ``PaddleJob`` for a Kubeflow training job;
        ``"kubeflow"`` for the Kubeflow kind of the sensor's framework; ``"TrainJob"`` for a Kubeflow Trainer v2
        TrainJob (its ``Complete``/``Failed`` conditions; the output of node 0).
    :param framework: the job's framework, checked against the job's own (the per-framework sensors set it).
    :param kubernetes_conn_id: the cncf provider's Kubernetes connection.
    :param deferrable: wait in the triggerer; default: ``[operators] default_deferrable``.
    :param watch_timeout: server-side timeout of each watch request of the deferred wait, in seconds (over
        ``watch_timings``' ``server_timeout``).
    :param watch_timings: how the deferred wait watches the job: a dict of ``jobstate.watch_timings.WatchTimings``
        fields (``server_timeout``, ``read_timeout_margin``, ``connect_timeout``, ``reconnect_budget``,
        ``reconnect_delay``, ``max_reconnect_delay``, ``jitter``); see ``docs/kubernetes.md``, "Timing".
    :param image_pull_grace: seconds a replica's image pull may keep failing (``ErrImagePull``,
        ``ImagePullBackOff``) before the sensor fails; default 0: at the first failed pull (``kind=None`` jobs).
        In ``reschedule`` mode, which keeps nothing between pokes, it counts from the pod's start.
    :param kwargs: ``BaseSensorOperator``'s: ``poke_interval``, ``timeout``, ``mode``, ``soft_fail``...
    """

    template_fields: Sequence[str] = ("job_name", "namespace")
    ui_color = "#e3eefb"
    #: The framework of a per-framework sensor (``None``: any).
    default_framework: str | None = None

    def __init__(
        self,
        *,
        job_name: str,
        namespace: str | None = None,
        kind: str | None = None,
        framework: str | None = None,
        kubernetes_conn_id: str | None = "kubernetes_default",
        deferrable: bool = conf.getboolean("operators", "default_deferrable", fallback=False),
        watch_timeout: int | None = None,
        watch_timings: Mapping[str, Any] | None = None,
        image_pull_grace: float = 0.0,
        **kwargs: Any,
    ) -> None:
        # As the operator: each key of the result is an XCom, a missing one resolves to None (see outputs.py).
        kwargs.setdefault("multiple_outputs", True)
        super().__init__(**kwargs)
        self.job_name = job_name
        self.namespace = namespace
        self.framework = framework or self.default_framework
        self.kind = self._resolve_kind(kind)
        self.kubernetes_conn_id = kubernetes_conn_id
        self.deferrable = deferrable
        self.watch_timeout = watch_timeout
        self.image_pull_grace = image_pull_grace
        # When each replica's pull was first seen failing (epoch seconds), kept across the pokes of one try.
        self._pull_failures: dict[str, float] = {}
        # Every replica of a Kubeflow job has started: its pods need no LIST in the next pokes of this try.
        self._all_started = False
        self.watch_timings = _checked_timings(type(self).__name__, watch_timings, watch_timeout)

    def _resolve_kind(self, kind: str | None) -> str | None:
        if kind == "kubeflow":
            found = [k for k, fw in KIND_FRAMEWORK.items() if fw == self.framework]
            if not found and self.framework:
                raise ValueError(f"{type(self).__name__}: {self.framework} has no Kubeflow kind; use kind=None "
                                 "(a job of the kubernetes backend)")
            if not found:
                raise ValueError(f"{type(self).__name__}: kind='kubeflow' needs a framework; use kind= "
                                 f"{', '.join(KIND_FRAMEWORK)}")
            return found[0]
        if kind == TRAINJOB_KIND:
            if self.framework in _NO_TRAINER_RUNTIME:
                raise ValueError(f"{type(self).__name__}: {self.framework} has no Kubeflow Trainer v2 runtime, so "
                                 "no TrainJob; use kind='kubeflow' or None")
            return kind
        if kind is not None and kind not in KIND_FRAMEWORK:
            raise ValueError(f"{type(self).__name__}: kind {kind!r} is not a Kubeflow training job; allowed: "
                             f"{', '.join(KIND_FRAMEWORK)}, {TRAINJOB_KIND}, 'kubeflow' or None (a job of the "
                             "kubernetes backend)")
        if kind is not None and self.framework and KIND_FRAMEWORK[kind] != self.framework:
            raise ValueError(f"{type(self).__name__}: a {kind} is a {KIND_FRAMEWORK[kind]} job, not "
                             f"{self.framework}")
        return kind

    # ------------------------------------------------------------------ poke

    def _reads(self) -> JobReads:
        """What the sensor finds and reads the job with: the same hook, resource and trigger as the backend that
        started it (``kubernetes``, ``kubeflow`` or ``trainjob``)."""
        # The one lazy boundary of the sensor: the hooks and triggers load the Kubernetes clients, at a poke only.
        from airflow_distributed.sensors.job_reads import JobReads

        return JobReads(self.kind, self.kubernetes_conn_id, self.log)

    def hook(self) -> KubeflowJobHook:
        return self._reads().hook()

    def pods_hook(self) -> PodJobHook:
        """The hook of a job of the ``kubernetes`` backend (``kind=None``): its pods, read as the operator does."""
        return self._reads().pods_hook()

    def _namespace(self, hook: KubeApiHook) -> str:
        return self.namespace or hook.default_namespace()

    def poke(self, context: Context) -> bool | PokeReturnValue:
        if self.kind is None:
            pods_hook = self.pods_hook()
            return self._poke_pods(pods_hook, self._namespace(pods_hook), context)
        hook = self.hook()
        return self._poke_kubeflow(hook, self._namespace(hook), context)

    def _poke_pods(self, hook: PodJobHook, namespace: str, context: Context) -> bool | PokeReturnValue:
        tracker = self._tracker(hook, namespace)
        if tracker is None:
            self.log.info("job %s/%s has no pods (yet)", namespace, self.job_name)
            return False
        verdict = tracker.verdict(time.time())
        if verdict is None:
            self.log.info("job %s/%s is running:\n%s", namespace, self.job_name, replica_table(tracker.statuses()))
            return False
        master = tracker.pod(tracker.master.name) or {}
        framework = _pod_env(master, ENV_FRAMEWORK) or self.framework or "unknown"
        self._check_framework(framework, f"job {namespace}/{self.job_name}")
        if not verdict.succeeded:
            raise AirflowFailException(f"job {namespace}/{self.job_name} failed: {verdict.describe()}")
        text = hook.read_output(namespace, master)
        return self._succeed(context, text, framework, "kubernetes", namespace, tracker.statuses())

    def _tracker(self, hook: PodJobHook, namespace: str) -> JobTracker | None:
        pods = hook.list_job_pods(namespace, self.job_name).get("items") or []
        slots = slots_of_pods(pods)
        if not slots:
            return None
        if self.reschedule:
            # A rescheduled poke is a new sensor with no memory: the failing pull counts from the pod's start.
            self._pull_failures = pod_start_times(pods)
        tracker = JobTracker(slots, startup_timeout=_NO_STARTUP_LIMIT, started_at=time.time(),
                             image_pull_grace=self.image_pull_grace, pull_failures=self._pull_failures)
        tracker.reset(pods)
        return tracker

    def _poke_kubeflow(self, hook: KubeflowJobHook, namespace: str, context: Context) -> bool | PokeReturnValue:
        what = f"{self.kind} {namespace}/{self.job_name}"
        obj = hook.get_kubeflow_job(namespace, self._reads().resource(), self.job_name)
        if obj is None:
            self.log.info("%s does not exist (yet)", what)
            return False
        status = hook.kind.status_of(obj)
        if status.state not in (ReplicaState.SUCCEEDED, ReplicaState.FAILED):
            self._check_pulls(hook, namespace, obj, what)
            self.log.info("%s is %s: %s", what, status.state, status.message or status.reason)
            return False
        pods = hook.kubeflow_pods(namespace, obj)
        if status.state == ReplicaState.FAILED:
            replica = self._reads().failed_replica(pods, hook.main_container(obj))
            detail = ": ".join(part for part in (status.reason, status.message) if part)
            raise AirflowFailException(f"{what} failed: {detail}" + (f"; {replica.describe()}" if replica else ""))
        trainjob = self.kind == TRAINJOB_KIND
        self.log.info("%s succeeded: %s", what, status.message if trainjob else success_rule(obj).description)
        statuses = hook.replica_statuses(pods, hook.main_container(obj))
        framework = (self.framework or "unknown") if trainjob else KIND_FRAMEWORK[str(self.kind)]
        return self._succeed(context, hook.kubeflow_output(namespace, obj), framework,
                             "trainjob" if trainjob else "kubeflow", namespace, statuses)

    def _check_pulls(self, hook: KubeflowJobHook, namespace: str, obj: Mapping[str, Any], what: str) -> None:
        """A Kubeflow job whose replica's image cannot be pulled stays ``Created``: while some replica has not
        started, each poke LISTs the job's pods and applies the ``kubernetes`` backend's pull-failure verdict; not
        while the job is suspended (no pods on purpose, maybe for hours), whose resume starts its replicas again."""
        if hook.kind.suspended_of(obj):
            self._pull_failures, self._all_started = {}, False
            return
        if self._all_started:
            return
        pods = hook.kubeflow_pods(namespace, obj)
        if self.reschedule:
            # A rescheduled poke is a new sensor with no memory: the failing pull counts from the pod's start.
            self._pull_failures = pod_start_times(pods)
        named = sorted(((str(pod["metadata"]["name"]), pod) for pod in pods), key=lambda item: item[0])
        verdict = image_failure(named, self._pull_failures, self.image_pull_grace, time.time())
        if verdict is not None:
            raise AirflowFailException(f"{what} failed: {verdict.describe()}")
        expected = hook.kind.expected_pods(obj)
        # Kept for the pokes of this try only (poke mode); a started pod does not pull its image again.
        self._all_started = expected is not None and len(named) >= expected and all(
            pod_started(pod) for _, pod in named)

    def _check_framework(self, found: str, what: str) -> None:
        if self.framework and found not in ("unknown", self.framework):
            raise AirflowFailException(f"{what} is a {found} job, not {self.framework}: use the {found} sensor")

    def _succeed(self, context: Context, text: str | None, framework: str, backend: str, namespace: str,
                 statuses: Sequence[Any]) -> PokeReturnValue:
        document = parse_output_document(text)
        if (warning := document_warning(document)) is not None:
            self.log.warning("job %s/%s succeeded; %s", namespace, self.job_name, warning)
        result = job_result(job_name=self.job_name, framework=framework, backend=backend,
                            state=ReplicaState.SUCCEEDED.value, document=document, replicas=statuses,
                            namespace=namespace)
        if document["metrics"] == {} and document["model_path"] is None and warning is None:
            self.log.warning("job %s/%s succeeded without an output document: no metrics or model path", namespace,
                             self.job_name)
        return PokeReturnValue(is_done=True, xcom_value=result)

    # ------------------------------------------------------------------ deferrable

    def execute(self, context: Context) -> Any:
        if not self.deferrable:
            return super().execute(context)
        try:
            return self._check_or_defer(context, time.time() + self.timeout)
        except AirflowFailException as error:
            # BaseSensorOperator.execute is bypassed here, so soft_fail is applied as it would be.
            if self.soft_fail:
                raise AirflowSkipException("Skipping due to soft_fail is set to True.") from error
            raise

    def _check_or_defer(self, context: Context, deadline: float) -> Any:
        """One poke; unless the job ended, defer until it changes (or, before it exists, for ``poke_interval``)."""
        done = self.poke(context)
        if done:
            return done.xcom_value if isinstance(done, PokeReturnValue) else None
        left = deadline - time.time()
        if left <= 0:
            raise AirflowSensorTimeout(f"Sensor has timed out; job {self.job_name} did not finish within "
                                       f"{self.timeout:g}s")
        trigger: Any
        if self.kind is not None:
            hook = self.hook()
            namespace = self._namespace(hook)
            trigger = self._kubeflow_trigger(hook, namespace)
        else:
            pods_hook = self.pods_hook()
            namespace = self._namespace(pods_hook)
            tracker = self._tracker(pods_hook, namespace)
            trigger = None if tracker is None else self._pods_trigger(namespace, slots_to_json(tracker.slots))
        if trigger is None:
            # Nothing to watch yet: come back after poke_interval.
            trigger = self._reads().wait_trigger(min(self.poke_interval, left))
        self.log.info("job %s/%s: waiting in the triggerer", namespace, self.job_name)
        self.defer(trigger=trigger, method_name="execute_complete", kwargs={"deadline": deadline},
                   timeout=timedelta(seconds=left))

    def _pods_trigger(self, namespace: str, replicas: list[list[Any]]) -> Any:
        return self._reads().pods_trigger(job_name=self.job_name, namespace=namespace, replicas=replicas,
                                          startup_timeout=_NO_STARTUP_LIMIT, started_at=time.time(),
                                          image_pull_grace=self.image_pull_grace, watch_timings=self.watch_timings)

    def _kubeflow_trigger(self, hook: KubeflowJobHook, namespace: str) -> Any:
        reads = self._reads()
        resource = reads.resource()
        if hook.get_kubeflow_job(namespace, resource, self.job_name) is None:
            return None
        return reads.kubeflow_trigger(job_name=self.job_name, namespace=namespace, group=resource.group,
                                      version=resource.version, plural=resource.plural,
                                      watch_timings=self.watch_timings, image_pull_grace=self.image_pull_grace)

    def execute_complete(self, context: Context, event: Any = None, deadline: float | None = None) -> Any:
        """The trigger fired: the job ended (read it once more, for its output or its failed replica), or it is
        time to look again for a job that did not exist yet."""
        deadline = deadline if deadline is not None else time.time() + self.timeout
        fired = JobEvent.read(event)  # None: the wait for a job not there yet is over (a TimeDeltaTrigger's)
        if fired is not None:
            if fired.kind == EventKind.FAILED and fired.verdict is not None:
                raise AirflowFailException(f"job {fired.namespace}/{self.job_name} failed: "
                                           f"{fired.verdict.describe()}")
            if fired.kind == EventKind.DELETED:
                raise AirflowFailException(fired.message or f"job {self.job_name} was deleted")
            if fired.kind in (EventKind.ERROR, EventKind.TIMEOUT):
                raise AirflowException(f"waiting for job {self.job_name}: {fired.text}")
        # resume_execution applies soft_fail to whatever this raises.
        return self._check_or_defer(context, deadline)


# ------------------------------------------------------------------------------------------ helpers (pure)


def _checked_timings(owner: str, timings: Mapping[str, Any] | None, watch_timeout: int | None) -> dict[str, Any]:
    """``watch_timings`` with ``watch_timeout`` folded in, as the trigger's kwargs carry it.

    :raises ValueError: a field or value ``WatchTimings`` refuses, named.
    """
    try:
        return WatchTimings.of(timings, server_timeout=watch_timeout).as_dict()
    except ValueError as error:
        raise ValueError(f"{owner}: watch_timings: {error}") from None


def slots_of_pods(pods: Sequence[Mapping[str, Any]]) -> tuple[ReplicaSlot, ...]:
    """The replicas of a job of the ``kubernetes`` backend, from its pods' labels, the master first."""
    slots = []
    for pod in pods:
        labels = (pod.get("metadata") or {}).get("labels") or {}
        if ROLE_LABEL not in labels:
            continue
        slots.append(ReplicaSlot(pod["metadata"]["name"], labels[ROLE_LABEL], int(labels.get(INDEX_LABEL) or 0),
                                 labels.get(MASTER_LABEL) == "true"))
    slots.sort(key=lambda slot: (not slot.is_master, slot.role, slot.index))
    if slots and not slots[0].is_master:
        return ()  # no master, no verdict: not a job this project started (or not complete yet)
    return tuple(slots)


def pod_start_times(pods: Sequence[Mapping[str, Any]]) -> dict[str, float]:
    """``status.startTime`` of each pod that has one, as epoch seconds (the kubelet starts pulling then)."""
    return {pod["metadata"]["name"]: parse_timestamp_ns(pod["status"]["startTime"]) / 10**9
            for pod in pods if (pod.get("status") or {}).get("startTime")}


def _pod_env(pod: Mapping[str, Any], name: str) -> str | None:
    for container in (pod.get("spec") or {}).get("containers") or []:
        if container.get("name") == MAIN_CONTAINER:
            for var in container.get("env") or []:
                if var.get("name") == name:
                    return var.get("value")
    return None


__all__ = ["KIND_FRAMEWORK", "TRAINJOB_KIND", "DistributedJobSensor", "slots_of_pods"]

"""``KubeflowJobTrigger``: wait in the triggerer for a Kubeflow training job (TFJob, PyTorchJob, MXJob, MPIJob).

The job object is followed by the one LIST + watch of its kind that the triggers of the namespace share in the
triggerer (``shared_watch``: resumed from its resourceVersion, relisted after 410 Gone), through
``kubernetes_asyncio``, the trigger keeping its own ``object_watch.ObjectWatch`` of its job; while a replica has
not started, its pods are listed at a pace (``pending_pods``), by each trigger for its own job. It fires one
event: ``succeeded`` or ``failed`` (with the status's reason and message, ``job_status``; or reason
``ImagePullFailed`` and a replica's pull-failure verdict), ``deleted``, ``timeout`` (the task's
``execution_timeout``) or ``error``. The operator's or sensor's
``execute_complete`` reads the output. Meanwhile the operator's trigger relays the master pod's new lines and progress
into the task log every ``logging_interval`` seconds (``log_relay``; the pod found by one LIST per relay).

``delete_on_kill``: the operator's trigger deletes the job when the user kills the deferred task (Airflow 3.3+
``on_kill``); a sensor's does not, since the job is not the sensor's to stop. Only the operator's trigger follows the
job's pods (the namespace's shared pod watch) for the replicas the cluster takes away: a sensor does not read them.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator, Mapping
from dataclasses import replace
from typing import Any, ClassVar

from airflow.providers.cncf.kubernetes.hooks.kubernetes import AsyncKubernetesHook
from kubernetes_asyncio import client as async_client

from airflow_distributed.hooks.api_retry import KubernetesJobError
from airflow_distributed.hooks.kubeflow import POD_GROUP_UNKNOWN, KubeflowJobHook, pod_group_read
from airflow_distributed.jobstate.disruption import TakenAway
from airflow_distributed.jobstate.job_event import JobEvent
from airflow_distributed.jobstate.object_wait import ObjectWaitEnd, judge_object_wait
from airflow_distributed.jobstate.object_watch import ObjectWatch, name_selector
from airflow_distributed.jobstate.pending_pods import PendingPods, pods_missing
from airflow_distributed.jobstate.pod_state import log_available
from airflow_distributed.manifests.kubeflow_status import KUBEFLOW_KIND, JobKind
from airflow_distributed.manifests.trainjob_status import is_launcher
from airflow_distributed.status import ReplicaState
from airflow_distributed.triggers.base import JobWaitTrigger
from airflow_distributed.triggers.hang_watchdog import Sample, TriggerHangWatchdog
from airflow_distributed.triggers.kubernetes import JOB_PODS
from airflow_distributed.triggers.log_relay import READ_TIMEOUT, MasterLog
from airflow_distributed.triggers.shared_watch import Delivery, WatchedKind

#: Seconds a trigger waits, once its job failed, for the pod watch's last events (``TakenAwayWatch``'s grace).
TAKEN_AWAY_GRACE = 0.5


def _soonest(*waits: float | None) -> float | None:
    found = [wait for wait in waits if wait is not None]
    return min(found) if found else None


def _name_of(obj: Mapping[str, Any]) -> str | None:
    return (obj.get("metadata") or {}).get("name")


class KubeflowJobTrigger(JobWaitTrigger):
    """Wait for a Kubeflow training job's ``Succeeded`` or ``Failed`` condition without holding a worker slot.

    :param job_name: the object's name.
    :param namespace: its namespace.
    :param group: API group (``kubeflow.org``).
    :param version: API version (``v1``; ``v2beta1`` for MPIJob).
    :param plural: ``tfjobs``, ``pytorchjobs``, ``mxjobs``, ``mpijobs``, ``xgboostjobs`` or ``paddlejobs``.
    :param kubernetes_conn_id: the cncf provider's Kubernetes connection.
    :param watch_timeout: server-side timeout of each watch request; the watch resumes after it.
    :param execution_deadline: epoch seconds at which the task's ``execution_timeout`` ends (``timeout`` event).
    :param delete_on_kill: delete the job when the deferred task is killed (the operator's trigger).
    :param started_at: epoch seconds the wait began; handed back in the event.
    :param watch_timings: ``WatchTimings.as_dict()``: watch timeouts, reconnect budget, jitter and the pace of
        the pod LISTs while replicas start.
    :param image_pull_grace: seconds a replica's image pull may keep failing before the job fails (0: at once).
    :param progress_timeout: the hang watchdog (``hang_watchdog``): at each look the job's pods are listed and the
        master's new lines read; none for this long while every pod runs fires ``failed`` with a ``hung`` verdict.
    :param resume_state: what the deferred task knew of its job and needs again to resume (its framework), handed
        back in every event as it is; small and JSON-safe.
    :param logging_interval: seconds between two relays of the master's new lines and progress into the task log
        (``log_relay``: the pod whose output the job's success rule reads); ``None``: none.
    :param log_cursor: where an earlier trigger of the same try stopped relaying them.
    """

    group: str
    version: str
    plural: str
    delete_on_kill: bool
    #: How an object of the kind is judged: the hook's own (a subclass for another kind has its own).
    kind: JobKind = KUBEFLOW_KIND
    image_pull_grace: float
    queue_timeout: float | None
    progress_timeout: float | None

    #: How the kind's pods read (which is the master, which container), as the task's hook reads them.
    hook_class: ClassVar[type[KubeflowJobHook]] = KubeflowJobHook

    def __init__(
        self,
        *,
        job_name: str,
        namespace: str,
        group: str,
        version: str,
        plural: str,
        kubernetes_conn_id: str | None = AsyncKubernetesHook.default_conn_name,
        watch_timeout: int | None = None,
        execution_deadline: float | None = None,
        delete_on_kill: bool = False,
        started_at: float | None = None,
        watch_timings: dict[str, Any] | None = None,
        image_pull_grace: float = 0.0,
        resume_state: dict[str, Any] | None = None,
        queue_timeout: float | None = None,
        logging_interval: float | None = None,
        log_cursor: dict[str, Any] | None = None,
        progress_timeout: float | None = None,
    ) -> None:
        super().__init__(
            job_name=job_name, namespace=namespace, group=group, version=version, plural=plural,
            queue_timeout=queue_timeout, progress_timeout=progress_timeout,
            kubernetes_conn_id=kubernetes_conn_id, watch_timeout=watch_timeout,
            execution_deadline=execution_deadline, delete_on_kill=delete_on_kill,
            started_at=started_at if started_at is not None else time.time(), watch_timings=watch_timings,
            image_pull_grace=image_pull_grace, resume_state=resume_state, logging_interval=logging_interval,
            log_cursor=log_cursor,
        )
        self._watch: ObjectWatch | None = None

    @property
    def what(self) -> str:
        return f"{self.plural} {self.namespace}/{self.job_name}"

    @property
    def watched_kind(self) -> WatchedKind:
        """Every object of this trigger's kind in the namespace, by name: one watch for the kind's triggers."""
        return WatchedKind(self.group, self.version, self.plural, None, _name_of)

    async def _wait(self) -> JobEvent:
        watch = self._watch = ObjectWatch(self.job_name)
        timings = self.timings
        # The queue limit counts from the start of the task's wait, not of this trigger (a triggerer restart).
        queue = None if self.queue_timeout is None else max(0.0, self.queue_timeout - (time.time() - self.started_at))
        pending = PendingPods(timings.pending_pods_interval, self.image_pull_grace, time.monotonic,
                              self.kind.suspended_of, queue_timeout=queue,
                              on_queue=lambda note: self.log.info("%s: %s", self.what, note))

        hang: TriggerHangWatchdog | None = None

        def judged() -> ObjectWaitEnd | None:
            return judge_object_wait(watch, self.kind.status_of, pending.verdict,
                                     hang.verdict() if hang is not None else None)

        def ended() -> bool:
            return judged() is not None

        def apply(delivery: Delivery) -> None:
            # A one-object view for the object watch: the job as listed or as the event left it.
            # The shared watch's cache is no consistent read: an object it lacks is only not seen yet (see
            # ObjectWatch); ``check`` asks the API server itself before the job is taken for deleted.
            if delivery.snapshot is not None:
                watch.on_list({"items": delivery.snapshot}, consistent=False)
            for kind, obj in delivery.events:
                watch.on_list({"items": [] if kind == "DELETED" else [obj]})

        def next_list_in() -> float | None:
            if watch.obj is None or pending.verdict is not None:
                return None
            queue = pending.seconds_to_queue_deadline()
            if not pending.pending or pending.suspended:
                return _soonest(queue, hang.wake_in() if hang is not None else None)
            following = pending.next_at - pending.clock()
            return _soonest(following, queue, hang.wake_in() if hang is not None else None)

        taken = TakenAway()
        async with self._feed(self.watched_kind, self.job_name) as feed, self.api_client() as api, \
                self._recording(taken):
            list_pods = async_client.CoreV1Api(api).list_namespaced_pod
            list_objects = async_client.CustomObjectsApi(api).list_namespaced_custom_object
            unseen_checked = False

            async def list_job() -> None:
                body = await self._json(list_objects(self.group, self.version, self.namespace, self.plural,
                                                     field_selector=name_selector(self.job_name),
                                                     _preload_content=False))
                watch.on_list(body)

            async def list_job_pods() -> None:
                pods = await self._json(list_pods(self.namespace, label_selector=self.kind.pods_selector(self.job_name),
                                                  _preload_content=False))
                items, expected = pods.get("items") or [], self.kind.expected_pods(watch.obj)
                group = await read_pod_group() if pods_missing(items, expected) else None
                pending.on_pods(items, expected, group)

            async def read_pod_group() -> dict[str, Any] | None:
                """The job's PodGroup by ``KubeflowJobHook.read_pod_group``'s rule: missing, ``None``; a read that
                fails (refused, or the retries ran out) is logged and tells nothing."""
                ref = self.kind.pod_group_of(watch.obj)
                if ref is None:
                    return None

                async def read() -> dict[str, Any] | None:
                    try:
                        return await self._json(async_client.CustomObjectsApi(api).get_namespaced_custom_object(
                            ref.group, ref.version, self.namespace, ref.plural, ref.name, _preload_content=False))
                    except async_client.ApiException as error:
                        if error.status == 404:
                            return None
                        raise

                try:
                    return await self._call(read, pod_group_read(self.namespace, ref))
                except KubernetesJobError as error:
                    self.log.warning(POD_GROUP_UNKNOWN, error)
                    return None

            async def sample() -> Sample:
                pods = await self._json(list_pods(self.namespace, label_selector=self.kind.pods_selector(self.job_name),
                                                  _preload_content=False))
                return self.hook_class.hang_sample(watch.obj or {}, pods.get("items") or [])

            if self.progress_timeout is not None:
                hang = TriggerHangWatchdog(self.progress_timeout, self.namespace, sample, self.api_client, self._answer,
                                           self.log)

            async def check() -> bool:
                nonlocal unseen_checked
                if watch.obj is None and not unseen_checked:
                    unseen_checked = True
                    await self._call(list_job, f"reading {self.what}")
                    return True
                looked = False
                if hang is not None and watch.obj is not None:
                    looked = await hang.check()
                if not pending.due_for(watch.obj):
                    return looked
                await self._call(list_job_pods, f"listing the pods of {self.what}")
                return True

            await self._read(feed, apply, ended, wake_in=next_list_in, check=check)
            if (self.delete_on_kill and watch.obj is not None
                    and self.kind.status_of(watch.obj).state == ReplicaState.FAILED):
                await asyncio.sleep(TAKEN_AWAY_GRACE)  # the pod that caused it, deleted just before, may be on its way
        event = self._ending(judged())
        if taken.pods:
            # The resumed task's verdict reads it (``KubeflowJobRun.finish``).
            event = replace(event, taken_away=taken.as_dict())
        return event

    @contextlib.asynccontextmanager
    async def _recording(self, taken: TakenAway) -> AsyncIterator[None]:
        """While the wait lasts, the job's pods from the namespace's shared pod watch go to ``taken`` (a pod deleted
        before the controller judges the job is seen only so); a pod watch that fails is logged and decides
        nothing. Only the operator's trigger (``delete_on_kill``) watches them: the resumed task words its failure
        with them (``KubeflowJobRun.finish``), while a sensor's event never reads them."""
        if not self.delete_on_kill:
            yield
            return

        def record(delivery: Delivery) -> None:
            for pod in delivery.snapshot or ():
                taken.observe(pod)
            for _, pod in delivery.events:
                taken.observe(pod)

        async with self._feed(JOB_PODS, self.job_name) as pods:

            async def follow() -> None:
                try:
                    while True:
                        delivery = await pods.next(None)
                        if delivery is not None:
                            record(delivery)
                except KubernetesJobError as error:
                    self.log.warning("%s: could not watch its pods (%s); a replica the cluster takes away from now "
                                     "on may be reported as the controller words it", self.what, error)

            task = asyncio.create_task(follow())
            try:
                yield
            finally:
                task.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await task
                with contextlib.suppress(KubernetesJobError):
                    delivery = pods.take()
                    if delivery is not None:
                        record(delivery)

    def _ending(self, end: ObjectWaitEnd | None) -> JobEvent:
        """The event of a wait that is over (``end``, ``judge_object_wait``'s), or at the task's deadline (``None``)."""
        return self._timeout() if end is None else end.event(self.what)

    async def _master_log(self) -> MasterLog | None:
        """The newest started pod of the master (one LIST of its pods), once the job object is seen."""
        obj = self._watch.obj if self._watch is not None else None
        if obj is None:
            return None
        kind = self.hook_class  # which pods are the master's, and its container: as the task's hook finds them
        container = kind.main_container(obj)
        async with self.api_client() as api:
            pods = (await self._json(async_client.CoreV1Api(api).list_namespaced_pod(
                self.namespace, label_selector=kind.master_selector(obj), _preload_content=False,
                _request_timeout=READ_TIMEOUT))).get("items") or []
        started = [pod for pod in pods if log_available(pod, container)]
        if not started:
            return None
        # An MPI TrainJob's launcher before its node 0 (``kubeflow_output`` reads the same pod), then the newest.
        pod = max(started, key=lambda p: (is_launcher(p), p["metadata"].get("creationTimestamp") or ""))
        return MasterLog(pod["metadata"]["name"], str(pod["metadata"].get("uid") or ""), container)

    async def on_kill(self) -> None:
        """Airflow 3.3+: the user killed the deferred task; the operator's job must not keep running."""
        if self._fired or not self.delete_on_kill:
            return
        async with self.api_client() as api:
            custom = async_client.CustomObjectsApi(api)

            async def delete() -> None:
                try:
                    await custom.delete_namespaced_custom_object(
                        self.group, self.version, self.namespace, self.plural, self.job_name,
                        body=async_client.V1DeleteOptions(propagation_policy="Background"))
                except async_client.ApiException as error:
                    if error.status != 404:
                        raise

            await self._call(delete, f"deleting {self.what}")
        self.log.info("deleted %s (task killed)", self.what)


__all__ = ["KubeflowJobTrigger"]

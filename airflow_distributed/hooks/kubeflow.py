"""Kubeflow backend I/O: submit a training job's custom object, watch it, read its master's output, delete it.

``KubeflowJobHook`` is a ``KubeApiHook`` (same connection, retries, error messages as the pod hook) with the calls a
Kubeflow ``TFJob``/``PyTorchJob``/``MXJob``/``MPIJob``/``XGBoostJob``/``PaddleJob`` needs. The operator in the
cluster creates and judges the pods; this hook only reads its verdict (``kubeflow_status.job_status``) through one
LIST and one watch of the object, resumed from its resourceVersion and relisted after 410 Gone (``object_watch``),
and, while some replica has not started, paced LISTs of its pods (``pending_pods``: a failed image pull, which the
object's status never shows, fails the wait at once); none while the job is suspended (``suspended_of``). Given
``emit``, the wait also follows the master's log into it (``pod_logs.MasterFollower``), which decides nothing.
"""

from __future__ import annotations

import contextlib
import logging
import math
import socket
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from kubernetes import client

from airflow_distributed.hooks.api_retry import KubernetesJobError
from airflow_distributed.hooks.kube_api import EXISTS, MISSING, KubeApiHook
from airflow_distributed.hooks.pod_logs import LOCATE_TIMEOUT, MasterFollower
from airflow_distributed.hooks.watch_loop import WatchCalls, WatchPolicy, run_watch
from airflow_distributed.jobstate.disruption import TakenAway
from airflow_distributed.jobstate.hang_watch import MasterLogWatch, all_running, hung_verdict
from airflow_distributed.jobstate.kubeflow_pods import pod_matches, replica_statuses_of_pods
from airflow_distributed.jobstate.log_cursor import LogCursor
from airflow_distributed.jobstate.object_wait import judge_object_wait
from airflow_distributed.jobstate.object_watch import ObjectWatch, name_selector
from airflow_distributed.jobstate.outcome import Ending, JobOutcome
from airflow_distributed.jobstate.pending_pods import PendingPods, pods_missing
from airflow_distributed.jobstate.pod_state import termination_message
from airflow_distributed.jobstate.watch_stream import ResumableWatch
from airflow_distributed.jobstate.watch_timings import WatchTimings
from airflow_distributed.manifests.kubeflow_kinds import BY_KIND, KubeflowResource
from airflow_distributed.manifests.kubeflow_status import (
    KUBEFLOW_KIND,
    JobKind,
    JobStatus,
    PodGroupRef,
    master_pod_selector,
)
from airflow_distributed.manifests.kubernetes import JOB_LABEL
from airflow_distributed.status import ReplicaState, ReplicaStatus


def resource_of_kind(kind: str) -> KubeflowResource:
    """``TFJob`` -> its group, version and plural.

    :raises ValueError: not a Kubeflow training job kind.
    """
    try:
        found = BY_KIND[kind]
    except KeyError:
        raise ValueError(f"kind {kind!r} is not a Kubeflow training job; allowed: {', '.join(BY_KIND)}") from None
    return KubeflowResource(found.group, found.version, found.plural, found.kind)


#: What a PodGroup read that fails logs (the task's and the trigger's): the job waits as if it had none.
POD_GROUP_UNKNOWN = "could not read the job's PodGroup (%s): whether its gang scheduler admitted it is not known"


def pod_group_read(namespace: str, ref: PodGroupRef) -> str:
    """What a PodGroup read is called in its errors and retries' log lines."""
    return f"reading PodGroup {namespace}/{ref.name}"


def main_container(obj: Mapping[str, Any]) -> str:
    """The container whose exit the Kubeflow operator reads (``tensorflow``, ``pytorch``, ``mxnet``, ``mpi``,
    ``xgboost``)."""
    return BY_KIND[str(obj.get("kind"))].container


# ------------------------------------------------------------------------------------------ pods taken away (sync)

#: The pod watch's own log: its ends and resumptions are no news for the task log.
_pod_watch_log = logging.getLogger(__name__)


class _PodsSeen(ResumableWatch):
    """A LIST and a watch of a job's pods, each pod handed to ``TakenAway.observe`` (a ``DELETED`` event's object
    is the pod as it was when deleted)."""

    def __init__(self, taken: TakenAway) -> None:
        super().__init__()
        self.taken = taken

    def on_list(self, body: Mapping[str, Any]) -> None:
        self._list_version(body)
        for pod in body.get("items") or []:
            self.taken.observe(pod)

    def on_line(self, line: str | bytes) -> None:
        event = self._event(line)
        if event is not None:
            self.taken.observe(event[1])


class TakenAwayWatch:
    """Watches a job's pods (the project's job label) from a thread of its own while the synchronous wait watches
    the job object, recording the pods the cluster takes away (``TakenAway``): a pod deleted before the controller
    judges the job is seen only so, since no LIST finds a deleted pod. The trigger reads the same from the
    namespace's shared pod watch. A watch that fails is logged and records nothing more: it decides nothing.

    :param grace: at ``stop(settle=True)``, how long what is still on its way is waited for.
    """

    def __init__(self, hook: KubeApiHook, namespace: str, job_name: str, taken: TakenAway, timings: WatchTimings,
                 grace: float = 0.5) -> None:
        self.hook, self.namespace, self.job_name, self.taken, self.timings = hook, namespace, job_name, taken, timings
        self.grace = grace
        self._stop = threading.Event()
        self._response: Any = None
        self._thread: threading.Thread | None = None

    def start(self) -> TakenAwayWatch:
        self._thread = threading.Thread(target=self._run, name=f"pods-of-{self.job_name}", daemon=True)
        self._thread.start()
        return self

    def _run(self) -> None:
        selector = f"{JOB_LABEL}={self.job_name}"
        pods = self.hook.core_v1_client.list_namespaced_pod
        seen = _PodsSeen(self.taken)

        def open_watch(version: str | None, seconds: int, timeout: tuple[float, float]) -> Any:
            self._response = pods(self.namespace, label_selector=selector, watch=True, resource_version=version,
                                  allow_watch_bookmarks=True, timeout_seconds=seconds, _request_timeout=timeout,
                                  _preload_content=False)
            return self._response

        calls = WatchCalls(
            list_=lambda: self.hook._json(pods(self.namespace, label_selector=selector, _preload_content=False)),
            open_watch=open_watch, on_list=seen.on_list, on_line=seen.on_line, done=self._stop.is_set)
        what = f"watching the pods of job {self.namespace}/{self.job_name}"
        try:
            run_watch(seen, calls, WatchPolicy(what, self.timings, self.hook.retry), sleep=self._pause,
                      log=_pod_watch_log)
        except Exception as error:
            if not self._stop.is_set():
                self.hook.job_log.warning("%s: %s; a replica the cluster takes away from now on may be reported as "
                                          "the job's controller words it", what, error)

    def _pause(self, seconds: float) -> None:
        self._stop.wait(seconds)  # a retry's pause, cut short by ``stop``

    def stop(self, *, settle: bool = False) -> None:
        """Ends the watch; with ``settle``, what it is reading first (the job failed: the pod that caused it was
        deleted just before, and its last state may still be on its way)."""
        self._stop.set()
        thread = self._thread
        if thread is None:
            return
        if settle:
            thread.join(self.grace)  # any line that comes ends the watch (``done``)
        # Closing the response would wait for the thread's read (its buffer's lock) until the server ends the
        # watch; shutting its socket down ends the read at once.
        sock = getattr(getattr(self._response, "connection", None), "sock", None)
        if sock is not None and thread.is_alive():
            with contextlib.suppress(OSError):  # closed meanwhile
                sock.shutdown(socket.SHUT_RDWR)
        thread.join(2.0)


# ------------------------------------------------------------------------------------------ the hook


@dataclass(frozen=True)
class KubeflowHandle:
    """A submitted job: the object as last read, and ``reattached`` (``None`` when this call created it, else the
    state an earlier try's job was found in: ``pending``, ``running`` or ``succeeded``)."""

    obj: dict[str, Any]
    reattached: str | None = None

    @property
    def name(self) -> str:
        return self.obj["metadata"]["name"]

    @property
    def namespace(self) -> str:
        return self.obj["metadata"]["namespace"]


class KubeflowJobHook(KubeApiHook):
    """Run distributed training jobs as Kubeflow Training Operator resources (same arguments as ``KubeApiHook``
    and ``PodJobHook``)."""

    hook_name = "Distributed training (Kubeflow)"
    #: How the watch, the reattach, the sensors and the trigger judge an object of the kind (a subclass's kind
    #: has its own; its trigger holds the same).
    kind: JobKind = KUBEFLOW_KIND

    # How the kind's pods read (pure; class methods, so that the trigger of the kind reads them the same way).

    @classmethod
    def main_container(cls, obj: Mapping[str, Any]) -> str:
        """The container whose exit and termination message count (``main_container``)."""
        return main_container(obj)

    @classmethod
    def replica_statuses(cls, pods: Sequence[Mapping[str, Any]], container: str) -> tuple[ReplicaStatus, ...]:
        """The rows of the job's replica table (``replica_statuses_of_pods``)."""
        return replica_statuses_of_pods(pods, container)

    @classmethod
    def master_selector(cls, obj: Mapping[str, Any]) -> str:
        """The label selector of the master's pods (the deciding replica's, ``master_pod_selector``)."""
        return master_pod_selector(obj)

    @classmethod
    def followed_master(cls, obj: Mapping[str, Any], pods: Sequence[Mapping[str, Any]]
                        ) -> tuple[Mapping[str, Any], str] | None:
        """The master's pod among ``pods`` (``master_pod``) and the container whose log is the master's: what a
        synchronous wait follows into the task log."""
        pod = cls.master_pod(obj, pods)
        return None if pod is None else (pod, cls.main_container(obj))

    @classmethod
    def master_pod(cls, obj: Mapping[str, Any], pods: Sequence[Mapping[str, Any]]) -> Mapping[str, Any] | None:
        """Among the job's pods, the one whose log the hang watchdog reads: the deciding replica's
        (``master_pod_selector``), the newest should the operator have replaced it."""
        selector = master_pod_selector(obj)
        found = [pod for pod in pods if pod_matches(pod, selector)]
        return max(found, key=lambda p: p["metadata"].get("creationTimestamp") or "", default=None)

    @classmethod
    def hang_sample(cls, obj: Mapping[str, Any], pods: Sequence[Mapping[str, Any]]) -> tuple[bool, str | None, str]:
        """What a look of the hang watchdog needs of the job's pods: whether every pod the job asks for runs (the
        only time its clock runs), the master pod's name and the container whose log is read."""
        container = cls.main_container(obj)
        rows = cls.replica_statuses(pods, container)
        pod = cls.master_pod(obj, pods)
        expected = cls.kind.expected_pods(obj) or 0
        running = pod is not None and all_running(row.state for row in rows) and len(rows) >= expected
        return running, (pod["metadata"]["name"] if pod is not None else None), container

    # ------------------------------------------------------------------ reading

    def get_kubeflow_job(self, namespace: str, resource: KubeflowResource, name: str) -> dict[str, Any] | None:
        response = self._call(f"reading {resource.kind} {namespace}/{name}",
                              self.custom_objects.get_namespaced_custom_object, resource.group, resource.version,
                              namespace, resource.plural, name, missing_ok=True, _preload_content=False)
        return None if response is MISSING else self._json(response)

    def list_pods(self, namespace: str, selector: str) -> list[dict[str, Any]]:
        response = self._call(f"listing pods {selector} in {namespace}", self.core_v1_client.list_namespaced_pod,
                              namespace, label_selector=selector, _preload_content=False)
        return self._json(response).get("items") or []

    def kubeflow_pods(self, namespace: str, obj: Mapping[str, Any]) -> list[dict[str, Any]]:
        """Every pod the Kubeflow operator made for the job."""
        return self.list_pods(namespace, self.kind.pods_selector(obj["metadata"]["name"]))

    def kubeflow_output(self, namespace: str, obj: Mapping[str, Any]) -> str | None:
        """The output document from the termination message of the replica whose success decides the job
        (``success_rule``: the Chief, else worker 0 of a TFJob; the Master; the Scheduler; the Launcher)."""
        pods = self.list_pods(namespace, self.master_selector(obj))
        container = main_container(obj)
        for pod in sorted(pods, key=lambda p: p["metadata"].get("creationTimestamp") or "", reverse=True):
            text = termination_message(pod, container)
            if text:
                return text
        return None

    # ------------------------------------------------------------------ submit

    def submit_kubeflow_job(self, namespace: str, resource: KubeflowResource, body: Mapping[str, Any],
                            *, delete_timeout: float = 120.0, field_validation: str | None = None) -> KubeflowHandle:
        """Create the job; a 409 means an earlier try's (names are fixed per task instance): one that runs or
        succeeded is reattached, one that failed or is being deleted is deleted and created anew.

        :param field_validation: ``Strict`` to have the API server refuse a field the CRD's schema does not have
            (instead of dropping it with a warning).

        :raises KubernetesJobError: the API refused it, or an object of that name is not this project's job.
        """
        name = body["metadata"]["name"]
        what = f"creating {resource.kind} {namespace}/{name}"
        extra: dict[str, Any] = {"field_validation": field_validation} if field_validation else {}
        for _ in range(2):
            created = self._call(what, self.custom_objects.create_namespaced_custom_object, resource.group,
                                 resource.version, namespace, resource.plural, body, exists_ok=True,
                                 _preload_content=False, **extra)
            if created is not EXISTS:
                return KubeflowHandle(self._json(created))
            existing = self.get_kubeflow_job(namespace, resource, name)
            if existing is None:
                continue  # deleted between the two calls: create again
            labels = (existing.get("metadata") or {}).get("labels") or {}
            if labels.get(JOB_LABEL) != name:
                raise KubernetesJobError(f"{resource.kind} {namespace}/{name} exists and is not a distributed training "
                                         f"job's (no label {JOB_LABEL}={name}); delete or rename it")
            status = self.kind.status_of(existing)
            if existing["metadata"].get("deletionTimestamp") is None and status.state != ReplicaState.FAILED:
                self.job_log.info("%s %s/%s from an earlier try is %s; reattaching", resource.kind, namespace, name,
                                  status.state)
                return KubeflowHandle(existing, reattached=status.state)
            self.job_log.info("%s %s/%s from an earlier try failed or is being deleted (%s); deleting it to start "
                              "again", resource.kind, namespace, name, status.reason)
            self.delete_kubeflow_job(namespace, resource, name, wait=True, timeout=delete_timeout)
        raise KubernetesJobError(f"{what}: 409 AlreadyExists, and the existing job could not be replaced")

    # ------------------------------------------------------------------ wait

    def wait_for_kubeflow_job(
        self,
        namespace: str,
        resource: KubeflowResource,
        name: str,
        *,
        watch_timings: WatchTimings | None = None,
        watch_timeout: int | None = None,
        stopped: Callable[[], bool] | None = None,
        on_change: Callable[[JobStatus], None] | None = None,
        on_object: Callable[[dict[str, Any]], None] | None = None,
        image_pull_grace: float = 0.0,
        queue_timeout: float | None = None,
        progress_timeout: float | None = None,
        emit: Callable[[str, str], None] | None = None,
        log_cursors: dict[str, LogCursor] | None = None,
        taken: TakenAway | None = None,
    ) -> JobOutcome:
        """Until the job succeeds or fails (its conditions), is deleted, or ``stopped()`` turns true; or a replica's
        image cannot be pulled (``pending_pods``: its pods are listed while some replica has not started).

        :param watch_timings: watch request timeouts, the reconnect budget and the pace of the pod LISTs
            (``jobstate.watch_timings.WatchTimings``).
        :param watch_timeout: ``timeoutSeconds`` of each watch request, over ``watch_timings.server_timeout``.
        :param on_change: called with the job's status whenever it changes.
        :param on_object: called with the object as seen whenever its status changes (after ``on_change``).
        :param image_pull_grace: seconds a replica's pull may keep failing (ErrImagePull, ImagePullBackOff).
        :param queue_timeout: seconds the job may wait for capacity (suspended, e.g. by Kueue, or a pod left
            unschedulable), from now; past it the wait ends with a ``queue`` verdict (``pending_pods``).
        :param progress_timeout: the hang watchdog (``hang_watch``): between watches, the job's pods are listed and
            the master's new lines read, bounded; no new line for this long while every pod runs ends the wait
            with a ``hung`` verdict naming the master.
        :param emit: the master's lines go to ``emit(pod, line)`` as it writes them, once each (``MasterFollower``:
            its pod as ``master_pod`` finds it among the pods listed while replicas start, or by a LIST of the
            master's pods every ``pending_pods_interval`` while there is none to follow, never while suspended;
            followed from a thread of its own; a look or read that fails decides nothing).
        :param log_cursors: where each followed master pod's log is, by uid, kept by the caller (its first line and
            first progress record: the startup phases).
        :param taken: where the pods the cluster takes away are recorded, kept by the caller: the job's pods are
            watched from a thread for it (``TakenAwayWatch``), and the pods this wait lists are handed to it too.
        """
        stopped = stopped or (lambda: False)
        timings = WatchTimings.of(watch_timings, server_timeout=watch_timeout)
        watch = ObjectWatch(name)
        pending = PendingPods(timings.pending_pods_interval, image_pull_grace, self._clock, self.kind.suspended_of,
                              queue_timeout=queue_timeout,
                              on_queue=lambda note: self.job_log.info("job %s/%s: %s", namespace, name, note))
        what = f"watching {resource.kind} {namespace}/{name}"
        outcome: list[JobOutcome] = []
        last: list[JobStatus] = []
        hang = None if progress_timeout is None else MasterLogWatch(progress_timeout, self._clock())
        master: list[str] = []
        # The master's lines: found among the pods listed here anyway, or by paced looks of its own.
        follower = None if emit is None else MasterFollower(
            self, namespace, lambda pods: self.followed_master(watch.obj or {}, pods), emit,
            interval=timings.pending_pods_interval, clock=self._clock, log=self.job_log, cursors=log_cursors)

        def done() -> bool:
            is_stopped = stopped()
            if not is_stopped and watch.obj is not None:
                status = self.kind.status_of(watch.obj)
                if status not in last[-1:]:
                    if on_change is not None:
                        on_change(status)
                    if on_object is not None:
                        on_object(watch.obj)
                last[:] = [status]
            # Every pod ran at the hang watchdog's last look, the freshest the wait has (``lambda: True``).
            hung = None if hang is None else hung_verdict(hang, master[-1] if master else None, lambda: True,
                                                          self._clock())
            end = judge_object_wait(watch, self.kind.status_of, pending.verdict, hung, stopped=is_stopped)
            if end is not None:
                outcome.append(end.outcome())
            return end is not None

        def list_job_pods() -> list[dict[str, Any]]:
            pods = self._json(self.core_v1_client.list_namespaced_pod(
                namespace, label_selector=self.kind.pods_selector(name), _preload_content=False)).get("items") or []
            if taken is not None:
                for pod in pods:
                    taken.observe(pod)
            return pods

        def follower_looks() -> bool:
            # Its own looks only while the wait lists no pods and the job is not suspended (no pods on purpose).
            return follower is not None and watch.obj is not None and not pending.pending and not pending.suspended

        def check_pods() -> None:
            if pending.due_for(watch.obj):
                pods, expected = list_job_pods(), self.kind.expected_pods(watch.obj)
                group = self.read_pod_group(namespace, watch.obj) if pods_missing(pods, expected) else None
                pending.on_pods(pods, expected, group)
                if follower is not None:
                    follower.on_pods(pods)
            if hang is not None and watch.obj is not None and hang.due(self._clock()):
                pods = list_job_pods()
                master[:] = self.look_at_master(namespace, watch.obj, pods, hang)
                if follower is not None:
                    follower.on_pods(pods)
            if follower is not None and follower_looks() and follower.due():
                follower.look(lambda: self.master_pods(namespace, watch.obj or {}))

        def watch_seconds() -> int:
            seconds = pending.watch_seconds(timings.server_timeout)
            if hang is not None:  # back in time for the next look at the master's log
                seconds = max(1, min(seconds, math.ceil(hang.seconds_to_look(self._clock()))))
            if follower is not None and follower_looks():  # back in time for its next look
                seconds = max(1, min(seconds, math.ceil(min(follower.seconds_to_look(), seconds))))
            return seconds

        args = (resource.group, resource.version, namespace, resource.plural)
        list_objects = self.custom_objects.list_namespaced_custom_object
        calls = WatchCalls(
            list_=lambda: self._json(list_objects(*args, field_selector=name_selector(name), _preload_content=False)),
            open_watch=lambda version, seconds, timeout: list_objects(
                *args, field_selector=name_selector(name), watch=True, resource_version=version,
                allow_watch_bookmarks=True, timeout_seconds=seconds, _request_timeout=timeout,
                _preload_content=False),
            on_list=watch.on_list,
            on_line=watch.on_line,
            done=done,
            watch_seconds=watch_seconds,
            check=check_pods,
            check_due=lambda: pending.due_for(watch.obj) or (hang is not None and hang.due(self._clock()))
            or (follower is not None and follower_looks() and follower.due()),
        )
        pod_watch = None if taken is None else TakenAwayWatch(self, namespace, name, taken, timings).start()
        try:
            run_watch(watch, calls, WatchPolicy(what, timings, self.retry, clock=self._clock), sleep=self._sleep,
                      log=self.job_log)
        except BaseException:
            if follower is not None:  # the wait failed (API gone, execution_timeout): no read to drain it
                follower.stop()
            if pod_watch is not None:
                pod_watch.stop()
            raise
        if pod_watch is not None:
            pod_watch.stop(settle=outcome[-1].ending == Ending.FAILED)
        if follower is not None and (watch.obj is None or outcome[-1].ending == Ending.STOPPED):
            follower.stop()  # killed: the job is being deleted, nothing to drain
        elif follower is not None:
            follower.finish(lambda: self.master_pods(namespace, watch.obj or {}))
        return outcome[-1]

    def read_pod_group(self, namespace: str, obj: Mapping[str, Any] | None) -> dict[str, Any] | None:
        """The job's PodGroup (``JobKind.pod_group_of``), ``None`` when it has none or the group is not there. A read
        the cluster refuses (a Role without the rule) is logged and tells nothing: the job waits as before. The
        trigger reads it by the same rule (``POD_GROUP_UNKNOWN``)."""
        ref = self.kind.pod_group_of(obj)
        if ref is None:
            return None
        try:
            response = self._call(pod_group_read(namespace, ref), self.custom_objects.get_namespaced_custom_object,
                                  ref.group, ref.version, namespace, ref.plural, ref.name, missing_ok=True,
                                  _preload_content=False)
        except KubernetesJobError as error:
            self.job_log.warning(POD_GROUP_UNKNOWN, error)
            return None
        return None if response is MISSING else self._json(response)

    def master_pods(self, namespace: str, obj: Mapping[str, Any]) -> list[dict[str, Any]]:
        """The master's pods (``master_selector``): one LIST, time-limited, no retries (the caller's look is tried
        again later)."""
        return self._json(self.core_v1_client.list_namespaced_pod(
            namespace, label_selector=self.master_selector(obj), _preload_content=False,
            _request_timeout=LOCATE_TIMEOUT)).get("items") or []

    def look_at_master(self, namespace: str, obj: Mapping[str, Any], pods: Sequence[Mapping[str, Any]],
                       hang: MasterLogWatch) -> list[str]:
        """One look of the hang watchdog: whether every pod the job asks for runs and, then, the master's new
        lines, read bounded; returns the master pod's name (empty while there is none). A read that fails is logged
        and tells nothing (the watchdog's clock starts again)."""
        running, master, container = self.hang_sample(obj, pods)
        lines: list[str] | None = None
        if running and master is not None:
            try:
                lines = self.read_log_lines(namespace, master, container, hang.query())
            except KubernetesJobError as error:
                self.job_log.warning("progress_timeout: could not read the master's log (%s); the watchdog's "
                                     "clock starts again", error)
        hang.observe(lines, running, self._clock(), time.time())  # the lines' stamps are wall-clock times
        return [master] if master is not None else []

    # ------------------------------------------------------------------ delete

    def delete_kubeflow_job(self, namespace: str, resource: KubeflowResource, name: str, *, wait: bool = False,
                            timeout: float = 120.0) -> bool:
        """Delete the object; the Kubeflow operator's ownerReferences take its pods and Services with it.

        :param wait: delete in the foreground and return once the object is gone (a job of the same name may
            then be created).
        :returns: whether there was something to delete.
        """
        what = f"deleting {resource.kind} {namespace}/{name}"
        policy = "Foreground" if wait else "Background"
        deleted = self._delete_one(what, self.custom_objects.delete_namespaced_custom_object, resource.group,
                                   resource.version, namespace, resource.plural, name,
                                   body=client.V1DeleteOptions(propagation_policy=policy))
        if wait:
            self._wait_until_gone(what, lambda: self.get_kubeflow_job(namespace, resource, name) is not None, timeout)
        return deleted


__all__ = [
    "POD_GROUP_UNKNOWN",
    "KubeflowHandle",
    "KubeflowJobHook",
    "TakenAwayWatch",
    "main_container",
    "pod_group_read",
    "resource_of_kind",
]

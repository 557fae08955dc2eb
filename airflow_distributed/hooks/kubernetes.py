"""Kubernetes backend I/O: create a job's objects, watch its pods, read its logs and output, delete it.

``PodJobHook`` (the hook of ``backend="kubernetes"``, whose jobs are plain pods) is a ``KubeApiHook`` (the cncf
provider's ``KubernetesHook``: same ``kubernetes_default`` connection and extras, with the project's retries) with
what a job of many coordinated pods needs on top:

- creation is idempotent: a Service (the owner) first, then its dependents, pods concurrently over a bounded
  pool; a create answered 409 AlreadyExists counts as done, and a job already there (same task instance,
  earlier try or restarted worker) is reattached, completed or replaced, never duplicated;
- waiting is one LIST and one label-selector watch per job, resumed from its resourceVersion and relisted after
  410 Gone (``job_watch``), whatever the number of replicas; quiet watches are resumed, never failures
  (``watch_loop``);
- transient failures (429, 5xx, connection errors) are retried with backoff (``api_retry``); everything else
  becomes a ``KubernetesJobError`` naming namespace/name, raised from the client's exception.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import FIRST_EXCEPTION, ThreadPoolExecutor, wait
from dataclasses import dataclass
from typing import Any

from airflow.providers.cncf.kubernetes.utils.pod_manager import EMPTY_XCOM_RESULT, PodManager
from kubernetes import client

from airflow_distributed.hooks.api_retry import KubernetesJobError, short_error
from airflow_distributed.hooks.kube_api import EXISTS, MISSING, KubeApiHook
from airflow_distributed.hooks.pod_logs import LogFollowers
from airflow_distributed.hooks.watch_loop import WatchCalls, WatchPolicy, run_watch
from airflow_distributed.jobstate.hang_watch import MasterLogWatch, all_running, hung_verdict
from airflow_distributed.jobstate.job_watch import JobTracker, JobWatch
from airflow_distributed.jobstate.log_cursor import LogCursor
from airflow_distributed.jobstate.outcome import Ending, JobOutcome
from airflow_distributed.jobstate.pod_state import ContainerState, container_state, termination_message
from airflow_distributed.jobstate.replica_table import TABLE_INTERVAL, TABLE_ROWS, TableReporter
from airflow_distributed.jobstate.verdicts import JobVerdict, ReplicaSlot
from airflow_distributed.jobstate.watch_timings import WatchTimings
from airflow_distributed.manifests.kubernetes import (
    JOB_LABEL,
    MAIN_CONTAINER,
    SIDECAR_CONTAINER,
    SIDECAR_STOP,
    JobObjects,
)
from airflow_distributed.status import ReplicaState, ReplicaStatus


class JobStopped(KubernetesJobError):
    """Creation was interrupted because the task is being killed."""


@dataclass(frozen=True)
class JobLook:
    """A job as one look found it: its Service (``None``: none) and its pods (``None``: not listed, the Service
    being absent or deleted)."""

    service: dict[str, Any] | None
    pods: list[dict[str, Any]] | None


@dataclass(frozen=True)
class JobHandle:
    """A job in the cluster. ``reattached`` is ``None`` when this call created it, else the state it was found in
    (``running`` or ``succeeded``); ``created`` counts the objects this call created."""

    namespace: str
    name: str
    uid: str
    reattached: ReplicaState | None = None
    created: int = 0

    def as_id(self) -> dict[str, str]:
        return {"namespace": self.namespace, "name": self.name, "uid": self.uid}


class PodJobHook(KubeApiHook):
    """Run a distributed training job's pods on Kubernetes (the arguments are ``KubeApiHook``'s;
    ``max_concurrency`` is the number of pods created at the same time)."""

    hook_name = "Distributed training (Kubernetes)"

    # ------------------------------------------------------------------ reading

    def get_service(self, namespace: str, name: str) -> dict[str, Any] | None:
        response = self._call(f"reading Service {namespace}/{name}", self.core_v1_client.read_namespaced_service,
                              name, namespace, missing_ok=True, _preload_content=False)
        return None if response is MISSING else self._json(response)

    def list_job_pods(self, namespace: str, name: str) -> dict[str, Any]:
        """The raw PodList of the job (``items`` and ``metadata.resourceVersion``)."""
        response = self._call(f"listing the pods of job {namespace}/{name}", self.core_v1_client.list_namespaced_pod,
                              namespace, label_selector=f"{JOB_LABEL}={name}", _preload_content=False)
        return self._json(response)

    def job_tracker(self, namespace: str, name: str, slots: Sequence[ReplicaSlot],
                    startup_timeout: float = float("inf"), *,
                    pods: Sequence[Mapping[str, Any]] | None = None) -> JobTracker:
        """The job's state now, from one LIST.

        :param pods: the job's pods as a LIST just read them: judged as they are, without a second LIST.
        """
        tracker = JobTracker(slots, startup_timeout=startup_timeout, started_at=self._clock())
        tracker.reset(pods if pods is not None else self.list_job_pods(namespace, name).get("items") or [])
        return tracker

    def job_verdict(self, namespace: str, name: str, slots: Sequence[ReplicaSlot], *,
                    pods: Sequence[Mapping[str, Any]] | None = None) -> JobVerdict | None:
        """How the job ended, from one LIST (or ``pods`` as one just read them); ``None`` while it runs (startup
        time is not judged here)."""
        return self.job_tracker(namespace, name, slots, pods=pods).verdict(self._clock())

    def look_at_job(self, namespace: str, name: str) -> JobLook:
        """The job's Service and, if it stands (not being deleted), its pods: one GET and one LIST, which the
        reattach that may follow takes as they are (``ensure_job(look=...)``) instead of reading them again."""
        service = self.get_service(namespace, name)
        if service is None or service["metadata"].get("deletionTimestamp"):
            return JobLook(service, None)
        return JobLook(service, self.list_job_pods(namespace, name).get("items") or [])

    # ------------------------------------------------------------------ creation

    def ensure_job(self, namespace: str, objects: JobObjects, slots: Sequence[ReplicaSlot], *,
                   stopped: Callable[[], bool] | None = None, look: JobLook | None = None) -> JobHandle:
        """The job of ``objects``, created or found: a job of this name that runs (or succeeded) is reattached and
        any pod it lacks (a worker that died while creating them) is created; one that failed, or is being
        deleted, is deleted and created anew, since names are fixed per task instance.

        :param objects: the job's objects, built without an owner: the dependents get the Service's uid through
            ``JobObjects.owned_by``, which is the same and much cheaper than building a big job again.
        :param slots: the job's replicas, to judge a job found in place.
        :param stopped: true once the task is being killed: creation stops and what was created is deleted.
        :param look: the job as ``look_at_job`` read it just before (a retry's reconnect): not read again.
        """
        name = objects.service.metadata.name
        existing = look.service if look is not None else self.get_service(namespace, name)
        if existing is not None:
            handle = self._reattach(namespace, name, existing, objects, slots, stopped,
                                    look.pods if look is not None else None)
            if handle is not None:
                return handle
        return self.create_job(namespace, objects, stopped=stopped)

    def _reattach(self, namespace: str, name: str, service: Mapping[str, Any], objects: JobObjects,
                  slots: Sequence[ReplicaSlot], stopped: Callable[[], bool] | None,
                  pods: list[dict[str, Any]] | None = None) -> JobHandle | None:
        labels = (service.get("metadata") or {}).get("labels") or {}
        if labels.get(JOB_LABEL) != name:
            raise KubernetesJobError(
                f"Service {namespace}/{name} exists and is not a distributed training job's "
                f"(no label {JOB_LABEL}={name}); delete or rename it"
            )
        uid = service["metadata"]["uid"]
        if service["metadata"].get("deletionTimestamp"):
            self.job_log.info("job %s/%s is being deleted; waiting for it to go before creating it again",
                              namespace, name)
            self.delete_job(namespace, name, wait=True)
            return None
        if pods is None:
            pods = self.list_job_pods(namespace, name).get("items") or []
        if any((pod.get("metadata") or {}).get("deletionTimestamp") for pod in pods):
            # An earlier try's clean-up is deleting its pods (a retry at once after an eviction can come before the
            # kubelet finishes): reattaching would wait on pods about to vanish.
            self.job_log.info("job %s/%s from an earlier try is being cleaned up; waiting for it to go before "
                              "creating it again", namespace, name)
            self.delete_job(namespace, name, wait=True)
            return None
        tracker = self.job_tracker(namespace, name, slots, pods=pods)
        verdict = tracker.verdict(self._clock())  # startup time is the wait's to judge, not this look
        if verdict is not None and not verdict.succeeded:
            self.job_log.info("job %s/%s from an earlier try failed (%s); deleting it to start again",
                              namespace, name, verdict.describe())
            self.delete_job(namespace, name, wait=True)
            return None
        if verdict is not None:
            self.job_log.info("job %s/%s already succeeded (earlier try); collecting its result", namespace, name)
            return JobHandle(namespace, name, uid, reattached=ReplicaState.SUCCEEDED)
        missing = tracker.missing()
        created = 0
        if missing:
            self.job_log.info("job %s/%s exists with %d of %d pods; creating the %d missing", namespace, name,
                              len(slots) - len(missing), len(slots), len(missing))
            created = self._create_dependents(namespace, objects.owned_by(uid), pods=set(missing), stopped=stopped)
        self.job_log.info("reattached to running job %s/%s", namespace, name)
        return JobHandle(namespace, name, uid, reattached=ReplicaState.RUNNING, created=created)

    def create_job(self, namespace: str, objects: JobObjects, *,
                   stopped: Callable[[], bool] | None = None) -> JobHandle:
        """Create the Service, then its dependents; a failure part-way deletes what was created, then raises."""
        name = objects.service.metadata.name
        body = self._call(f"creating Service {namespace}/{name}", self.core_v1_client.create_namespaced_service,
                          namespace, objects.service, exists_ok=True, _preload_content=False)
        if body is EXISTS:  # created by an earlier attempt whose answer was lost, or just now by a twin
            service = self.get_service(namespace, name)
            if service is None:
                raise KubernetesJobError(f"creating Service {namespace}/{name}: 409 AlreadyExists, then not found")
        else:
            service = self._json(body)
        uid = service["metadata"]["uid"]
        try:
            created = 1 + self._create_dependents(namespace, objects.owned_by(uid), stopped=stopped)
        except BaseException:
            # A half-created job would hold its pods' resources forever: delete it (cascade) before raising.
            self._delete_quietly(namespace, name)
            raise
        return JobHandle(namespace, name, uid, created=created)

    def _create_dependents(self, namespace: str, objects: JobObjects, pods: set[str] | None = None,
                           stopped: Callable[[], bool] | None = None) -> int:
        """Secrets, ConfigMaps and the PodGroup in order, then the pods (all, or those named) concurrently."""
        created = 0
        for secret in objects.secrets:
            created += self._create_one(f"creating Secret {namespace}/{secret.metadata.name}",
                                        self.core_v1_client.create_namespaced_secret, namespace, secret)
        for config_map in objects.config_maps:
            created += self._create_one(f"creating ConfigMap {namespace}/{config_map.metadata.name}",
                                        self.core_v1_client.create_namespaced_config_map, namespace, config_map)
        if objects.pod_group is not None:
            group = objects.pod_group
            api_group, version = group["apiVersion"].split("/")
            created += self._create_one(f"creating PodGroup {namespace}/{group['metadata']['name']}",
                                        self.custom_objects.create_namespaced_custom_object, api_group, version,
                                        namespace, "podgroups", group)
        chosen = [pod for pod in objects.pods if pods is None or pod.metadata.name in pods]
        return created + self._create_pods(namespace, chosen, stopped or (lambda: False))

    def _create_pods(self, namespace: str, pods: Sequence[client.V1Pod], stopped: Callable[[], bool]) -> int:
        if not pods:
            return 0
        create = self.core_v1_client.create_namespaced_pod

        def one(pod: client.V1Pod) -> int:
            if stopped():
                raise JobStopped(f"creating the pods of job {namespace}: stopped (task killed)")
            # The client serialises the model here, in the worker thread, overlapping other pods' requests.
            return self._create_one(f"creating pod {namespace}/{pod.metadata.name}", create, namespace, pod)

        if len(pods) == 1:
            return one(pods[0])
        with ThreadPoolExecutor(max_workers=min(self.max_concurrency, len(pods)),
                                thread_name_prefix="create-pod") as pool:
            futures = [pool.submit(one, pod) for pod in pods]
            done, pending = wait(futures, return_when=FIRST_EXCEPTION)
            failed = next((f for f in done if f.exception() is not None), None)
            if failed is not None:
                for future in pending:
                    future.cancel()
                raise failed.exception()  # type: ignore[misc]
        return sum(future.result() for future in futures)

    def recreate_pod(self, namespace: str, pod: client.V1Pod, *, timeout: float = 120.0) -> None:
        """Delete a replica's pod and create it again under the same name, so that its address (the headless
        Service's ``<pod>.<job>``) stays the same: the task restarts a lost replica of an elastic job this way."""
        name = pod.metadata.name
        self._delete_one(f"deleting pod {namespace}/{name}", self.core_v1_client.delete_namespaced_pod, name,
                         namespace, grace_period_seconds=0)

        def present() -> bool:
            found = self._call(f"reading pod {namespace}/{name}", self.core_v1_client.read_namespaced_pod, name,
                               namespace, missing_ok=True, _preload_content=False)
            if found is MISSING:
                return False
            self._done(found)
            return True

        # The name is taken until the old pod is gone: creating earlier would answer 409 AlreadyExists.
        self._wait_until_gone(f"restarting pod {namespace}/{name}", present, timeout, pause=0.1)
        self._create_one(f"creating pod {namespace}/{name}", self.core_v1_client.create_namespaced_pod, namespace,
                         pod)

    # ------------------------------------------------------------------ waiting

    def wait_for_job(
        self,
        namespace: str,
        name: str,
        slots: Sequence[ReplicaSlot],
        *,
        startup_timeout: float,
        queue_timeout: float | None = None,
        watch_timings: WatchTimings | None = None,
        watch_timeout: int | None = None,
        on_change: Callable[[tuple[ReplicaStatus, ...]], None] | None = None,
        stopped: Callable[[], bool] | None = None,
        follow: Sequence[str] = (),
        emit: Callable[[str, str], None] | None = None,
        image_pull_grace: float = 0.0,
        log_cursors: dict[str, tuple[str, LogCursor]] | None = None,
        progress_timeout: float | None = None,
    ) -> JobOutcome:
        """Until the master succeeds or a replica fails: one LIST, then one watch of the job's pods.

        :param startup_timeout: seconds every replica gets to start, from now (with ``queue_timeout``: from when the
            last was scheduled).
        :param queue_timeout: seconds the replicas may wait to be scheduled, from now (``JobTracker``).
        :param watch_timings: watch request timeouts and the reconnect budget (``jobstate.watch_timings.WatchTimings``).
        :param watch_timeout: ``timeoutSeconds`` of each watch request, over ``watch_timings.server_timeout``.
        :param on_change: called with the replicas' states when they change (paced for big jobs).
        :param stopped: true once the task is being killed: the wait ends with a ``stopped`` verdict.
        :param follow: replicas whose main container's log goes to ``emit(replica, line)`` as it is written.
        :param image_pull_grace: seconds a replica's image pull may keep failing before the job fails (0: at once).
        :param log_cursors: where each followed log is, kept by the caller across the waits of one try
            (``LogFollowers``): a second wait goes on where the first stopped.
        :param progress_timeout: the hang watchdog: the master's log is looked at between watches
            (``hang_watch``); no new line for this long while every replica runs ends the wait with a ``hung``
            verdict.
        """
        stopped = stopped or (lambda: False)
        tracker = JobTracker(slots, startup_timeout=startup_timeout, started_at=self._clock(),
                             image_pull_grace=image_pull_grace, queue_timeout=queue_timeout)
        followers = LogFollowers(self, namespace, follow, emit, tracker, self.job_log, log_cursors)
        report = TableReporter(on_change, self._clock, TABLE_INTERVAL if len(slots) > TABLE_ROWS else 0.0,
                               on_queue=lambda note: self.job_log.info("job %s/%s: %s", namespace, name, note))
        timings = WatchTimings.of(watch_timings, server_timeout=watch_timeout)
        watch = JobWatch(tracker)
        verdict: list[JobVerdict] = []
        hang = None if progress_timeout is None else MasterLogWatch(progress_timeout, self._clock())

        def done() -> bool:
            if stopped():
                # Before the verdict: a kill deletes the pods, which would read as a failure of the job.
                verdict.append(JobVerdict(ReplicaState.FAILED, cause=Ending.STOPPED))
                return True
            followers.start_ready()
            report.flush(tracker)
            found = tracker.verdict(self._clock())
            if found is None and hang is not None:
                found = hung_verdict(hang, tracker.master.name,
                                     lambda: all_running(row.state for row in tracker.statuses()), self._clock())
            if found is not None:
                report.flush(tracker, force=True)
                verdict.append(found)
            return found is not None

        def look() -> None:
            assert hang is not None
            self.look_at_master(namespace, tracker, hang)

        def watch_seconds() -> int:
            seconds = watch.watch_seconds(self._clock(), timings.server_timeout)
            if hang is not None:  # back in time for the next look at the master's log
                seconds = max(1, min(seconds, math.ceil(hang.seconds_to_look(self._clock()))))
            return seconds

        selector = f"{JOB_LABEL}={name}"
        calls = WatchCalls(
            list_=lambda: self._json(self.core_v1_client.list_namespaced_pod(
                namespace, label_selector=selector, _preload_content=False)),
            open_watch=lambda version, seconds, timeout: self.core_v1_client.list_namespaced_pod(
                namespace, label_selector=selector, watch=True, resource_version=version,
                allow_watch_bookmarks=True, timeout_seconds=seconds, _request_timeout=timeout,
                _preload_content=False),
            on_list=lambda body: report(watch.on_list(body), tracker),
            on_line=lambda line: report(watch.on_line(line), tracker),
            done=done,
            watch_seconds=watch_seconds,
            check=look if hang is not None else None,
            check_due=(lambda: hang.due(self._clock())) if hang is not None else None,
        )
        policy = WatchPolicy(f"watching the pods of job {namespace}/{name}", timings, self.retry, clock=self._clock)
        try:
            run_watch(watch, calls, policy, sleep=self._sleep, log=self.job_log)
        finally:
            followers.finish()
        return verdict[-1].outcome(tracker.statuses(), logs=followers.tails(), pods=tracker.last_pods())

    def look_at_master(self, namespace: str, tracker: JobTracker, hang: MasterLogWatch) -> None:
        """One look of the hang watchdog: the master's new lines, read bounded, while every replica runs. A read
        that fails is logged and tells nothing (the watchdog's clock starts again)."""
        running = all_running(row.state for row in tracker.statuses())
        lines: list[str] | None = None
        if running:
            try:
                lines = self.read_log_lines(namespace, tracker.master.name, MAIN_CONTAINER, hang.query())
            except KubernetesJobError as error:
                self.job_log.warning("progress_timeout: could not read the master's log (%s); the watchdog's "
                                     "clock starts again", error)
        hang.observe(lines, running, self._clock(), time.time())  # the lines' stamps are wall-clock times

    # ------------------------------------------------------------------ logs, events, output

    def pod_events(self, namespace: str, pod: str, limit: int = 5) -> list[str]:
        """The pod's latest events, ``Warning FailedScheduling: 0/3 nodes are available...``; best effort."""
        try:
            response = self._call(f"listing the events of pod {namespace}/{pod}",
                                  self.core_v1_client.list_namespaced_event, namespace,
                                  field_selector=f"involvedObject.name={pod}", _preload_content=False)
            items = self._json(response).get("items") or []
        except KubernetesJobError as error:
            self.job_log.info("could not read the events of pod %s/%s: %s", namespace, pod, error)
            return []
        items.sort(key=lambda e: e.get("lastTimestamp") or e.get("eventTime") or "")
        return [f"{e.get('type', '')} {e.get('reason', '')}: {e.get('message', '')}".strip()
                for e in items[-limit:]]

    def read_output(self, namespace: str, pod: Mapping[str, Any]) -> str | None:
        """The master's output document: from its XCom sidecar (then stopped), else its termination message.

        :param pod: the master pod as the watch last saw it.
        """
        name = pod["metadata"]["name"]
        sidecar, fields = container_state(pod, SIDECAR_CONTAINER)
        if sidecar == ContainerState.WAITING:
            # Its image could not be pulled, typically: say so, or the fallback's 4 KiB limit would go unexplained.
            self.job_log.warning("the XCom sidecar of %s/%s did not start (%s: %s): the output comes from the master's "
                                 "termination message (4 KiB at most); the connection's xcom_sidecar_container_image "
                                 "names an image the cluster can pull", namespace, name, fields.get("reason"),
                                 fields.get("message") or "no message")
        if sidecar == ContainerState.RUNNING:
            try:
                text = PodManager(self.core_v1_client).extract_xcom_json(self._model(pod, "V1Pod"))
            except Exception as error:
                # Not stopped either: the same exec would fail the same way; it ends at the deletion's SIGTERM.
                self.job_log.info("could not read the output of %s/%s from its XCom sidecar (%s); "
                                  "using its termination message", namespace, name, short_error(error))
            else:
                self.stop_sidecar(namespace, name)
                if text and text.strip() != EMPTY_XCOM_RESULT:
                    return text
        return termination_message(pod)

    def stop_sidecar(self, namespace: str, pod: str) -> None:
        """End the XCom sidecar of ``pod`` once its output is read (``SIDECAR_STOP``): the pod is then done, and
        its deletion has nothing to wait for. Best effort: a sidecar not stopped ends at the deletion's SIGTERM."""
        try:
            self.run_in_container(namespace, pod, SIDECAR_CONTAINER, list(SIDECAR_STOP))
        except Exception as error:
            self.job_log.info("could not stop the XCom sidecar of %s/%s (%s): it ends when the pod is deleted",
                              namespace, pod, short_error(error))

    # ------------------------------------------------------------------ deletion

    def delete_job(self, namespace: str, name: str, *, wait: bool = False, timeout: float = 300.0) -> bool:
        """Delete the Service: the garbage collector deletes every other object of the job (cascade).

        :param wait: delete in the foreground and return only once the Service and its pods are gone (so that a
            job of the same name can be created).
        :returns: whether there was something to delete.
        """
        policy = "Foreground" if wait else "Background"
        deleted = self._delete_one(f"deleting job {namespace}/{name}", self.core_v1_client.delete_namespaced_service,
                                   name, namespace, body=client.V1DeleteOptions(propagation_policy=policy))
        if wait:
            def present() -> bool:
                return (self.get_service(namespace, name) is not None
                        or bool(self.list_job_pods(namespace, name)["items"]))

            self._wait_until_gone(f"deleting job {namespace}/{name}", present, timeout)
        return deleted

    def delete_secrets(self, namespace: str, names: Sequence[str]) -> int:
        """Delete these Secrets of a job now (those already gone count as done), rather than when the garbage
        collector gets to them, or never, when the clean-up policy keeps the job's Service and pods.

        :returns: how many there were to delete.
        """
        return sum(self._delete_one(f"deleting Secret {namespace}/{name}", self.core_v1_client.delete_namespaced_secret,
                                    name, namespace) for name in names)

    def delete_unfinished_pods(self, namespace: str, name: str, keep: Sequence[str] = ()) -> None:
        """Delete the job's pods that are not Succeeded or Failed (one request), except those in ``keep``."""
        selector = ["status.phase!=Succeeded", "status.phase!=Failed", *(f"metadata.name!={pod}" for pod in keep)]
        response = self._call(f"deleting the running pods of job {namespace}/{name}",
                              self.core_v1_client.delete_collection_namespaced_pod, namespace,
                              label_selector=f"{JOB_LABEL}={name}", field_selector=",".join(selector),
                              _preload_content=False)
        self._done(response)

    def _delete_quietly(self, namespace: str, name: str) -> None:
        try:
            self.delete_job(namespace, name)
        except Exception as error:
            self.job_log.error("could not delete job %s/%s after a failed creation: %s", namespace, name, error)


#: The old public name of the pods backend's hook, kept for the users who import it (DAGs, the connection form).
DistributedTrainingHook = PodJobHook


__all__ = ["DistributedTrainingHook", "JobHandle", "JobLook", "JobStopped", "KubernetesJobError", "PodJobHook"]

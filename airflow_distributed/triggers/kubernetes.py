"""``DistributedJobTrigger``: a deferred task's wait for its Kubernetes job, in the triggerer.

The job's pods are followed by the one LIST + watch of the provider's pods (``airflow-distributed/job`` label) that
every trigger of the namespace shares in the triggerer (``shared_watch``: the ``watch_loop`` policy, resumed,
relisted after 410), through ``kubernetes_asyncio`` and the cncf provider's ``AsyncKubernetesHook``; the trigger
keeps its own ``job_watch.JobTracker`` of its job's pods, as ``PodJobHook.wait_for_job`` does with a
watch of its own. It fires one event: ``succeeded``, ``failed`` (with the verdict), ``timeout`` (the
task's ``execution_timeout``) or ``error``; the operator's ``execute_complete`` collects the output and cleans up.
Meanwhile it relays the master's new lines and progress into the task log every ``logging_interval`` seconds
(``log_relay``; the master's pod from its tracker).

A user killing the deferred task (mark failed/success, clear) deletes the job: ``on_kill()`` on Airflow 3.3+,
``cleanup()`` on older versions, where it only deletes when the task is no longer deferred, so a triggerer
restart (the trigger moves, the task still waits) leaves the job running.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from functools import cached_property
from typing import Any

from airflow import __version__
from airflow.providers.cncf.kubernetes.hooks.kubernetes import AsyncKubernetesHook
from airflow.sdk.execution_time.task_runner import RuntimeTaskInstance
from airflow.utils.state import TaskInstanceState
from asgiref.sync import sync_to_async
from kubernetes_asyncio import client as async_client
from packaging.version import Version

from airflow_distributed.jobstate.job_event import EventKind, JobEvent
from airflow_distributed.jobstate.job_watch import JobTracker
from airflow_distributed.jobstate.pod_state import log_available, pod_essentials
from airflow_distributed.jobstate.replica_table import TABLE_INTERVAL, TABLE_ROWS, TableReporter, replica_table
from airflow_distributed.jobstate.verdicts import JobVerdict, slots_from_json
from airflow_distributed.manifests.pod_names import JOB_LABEL, MAIN_CONTAINER
from airflow_distributed.triggers.api_clients import client_configuration
from airflow_distributed.triggers.base import JobWaitTrigger
from airflow_distributed.triggers.hang_watchdog import TriggerHangWatchdog
from airflow_distributed.triggers.log_relay import MasterLog
from airflow_distributed.triggers.shared_watch import Delivery, WatchedKind


def _job_of_pod(pod: Mapping[str, Any]) -> str | None:
    return ((pod.get("metadata") or {}).get("labels") or {}).get(JOB_LABEL)


#: The provider's pods of a namespace (every job's), each kept as ``pod_essentials``: what the triggers of the jobs
#: in one namespace share one watch of.
JOB_PODS = WatchedKind("", "v1", "pods", JOB_LABEL, _job_of_pod, pod_essentials)


def _airflow_version() -> tuple[int, int]:
    release = Version(__version__).release
    return release[0], release[1] if len(release) > 1 else 0


#: From Airflow 3.3 the triggerer calls a trigger's on_kill() when a user kills its deferred task.
_AIRFLOW_HAS_TRIGGER_ON_KILL = _airflow_version() >= (3, 3)


class DistributedJobTrigger(JobWaitTrigger):
    """Wait for a distributed training job's verdict without holding a worker slot.

    :param job_name: the job (its Service's name and the pods' ``airflow-distributed/job`` label).
    :param namespace: the job's namespace.
    :param replicas: ``verdicts.slots_to_json`` of the job's replicas, master first.
    :param startup_timeout: seconds every replica gets to start, from ``started_at`` (with ``queue_timeout``: from
        when the last was scheduled).
    :param queue_timeout: seconds the replicas may wait to be scheduled, from ``started_at`` (``JobTracker``).
    :param progress_timeout: the hang watchdog (``hang_watchdog``): no new line of the master for this long while
        every replica runs fires ``failed`` with a ``hung`` verdict.
    :param started_at: epoch seconds the startup window opened (kept across triggerer restarts).
    :param kubernetes_conn_id: the cncf provider's Kubernetes connection.
    :param connection_extras: the connection's extras given directly (no connection lookup).
    :param cluster_context: a kubeconfig context.
    :param config_dict: a kubeconfig as a dict.
    :param in_cluster: use the triggerer pod's service account.
    :param watch_timeout: server-side timeout of each watch request; the watch resumes after it (over
        ``watch_timings``' ``server_timeout``).
    :param execution_deadline: epoch seconds at which the task's ``execution_timeout`` ends: the trigger fires
        ``timeout`` then, so that ``execute_complete`` cleans up (a framework timeout would skip it).
    :param image_pull_grace: seconds a replica's image pull may keep failing before the job fails (0: at once).
    :param watch_timings: ``WatchTimings.as_dict()``: watch timeouts, reconnect budget and jitter.
    :param logging_interval: seconds between two relays of the master's new lines and progress into the task log
        (``log_relay``); ``None``: none.
    :param log_cursor: where an earlier trigger of the same try stopped relaying them.
    :param resume_state: what the deferred task knew of its job and needs again to resume (its framework, an elastic
        budget), handed back in every event as it is, so that the task does not parse its spec again for it; small
        and JSON-safe.
    """

    replicas: list[list[Any]]
    startup_timeout: float
    queue_timeout: float | None
    progress_timeout: float | None
    image_pull_grace: float
    connection_extras: dict[str, Any] | None
    cluster_context: str | None
    config_dict: dict[str, Any] | None
    in_cluster: bool | None

    def __init__(
        self,
        *,
        job_name: str,
        namespace: str,
        replicas: list[list[Any]],
        startup_timeout: float,
        started_at: float,
        kubernetes_conn_id: str | None = AsyncKubernetesHook.default_conn_name,
        connection_extras: dict[str, Any] | None = None,
        cluster_context: str | None = None,
        config_dict: dict[str, Any] | None = None,
        in_cluster: bool | None = None,
        watch_timeout: int | None = None,
        execution_deadline: float | None = None,
        image_pull_grace: float = 0.0,
        watch_timings: dict[str, Any] | None = None,
        resume_state: dict[str, Any] | None = None,
        queue_timeout: float | None = None,
        logging_interval: float | None = None,
        log_cursor: dict[str, Any] | None = None,
        progress_timeout: float | None = None,
    ) -> None:
        super().__init__(
            job_name=job_name, namespace=namespace, replicas=replicas, startup_timeout=startup_timeout,
            queue_timeout=queue_timeout, progress_timeout=progress_timeout,
            started_at=started_at, kubernetes_conn_id=kubernetes_conn_id, connection_extras=connection_extras,
            cluster_context=cluster_context, config_dict=config_dict, in_cluster=in_cluster,
            watch_timeout=watch_timeout, execution_deadline=execution_deadline, watch_timings=watch_timings,
            image_pull_grace=image_pull_grace, resume_state=resume_state, logging_interval=logging_interval,
            log_cursor=log_cursor,
        )
        self._tracker: JobTracker | None = None

    @cached_property
    def hook(self) -> AsyncKubernetesHook:
        return AsyncKubernetesHook(
            conn_id=self.kubernetes_conn_id,
            connection_extras=self.connection_extras,
            cluster_context=self.cluster_context,
            config_dict=self.config_dict,
            in_cluster=self.in_cluster,
            client_configuration=client_configuration(),
        )

    def connection_identity(self) -> dict[str, Any]:
        return {"conn_id": self.kubernetes_conn_id, "connection_extras": self.connection_extras,
                "cluster_context": self.cluster_context, "config_dict": self.config_dict,
                "in_cluster": self.in_cluster}

    # ------------------------------------------------------------------ run

    @property
    def what(self) -> str:
        return f"job {self.namespace}/{self.job_name}"

    def _event_base(self) -> dict[str, Any]:
        # The replicas ride along so that execute_complete needs nothing but the event.
        return {**super()._event_base(), "replicas": self.replicas}

    async def _wait(self) -> JobEvent:
        verdict = await self._verdict()
        if verdict is None:
            return self._timeout()
        return JobEvent(EventKind(verdict.state), verdict=verdict)

    async def _verdict(self) -> JobVerdict | None:
        """The job's verdict; ``None`` once the task's execution_timeout is over."""
        tracker = JobTracker(slots_from_json(self.replicas), startup_timeout=self.startup_timeout,
                             started_at=self.started_at, image_pull_grace=self.image_pull_grace,
                             queue_timeout=self.queue_timeout)
        self._tracker = tracker
        report = TableReporter(self._log_table, time.time, TABLE_INTERVAL if len(tracker.slots) > TABLE_ROWS else 0.0,
                               on_queue=lambda note: self.log.info("%s: %s", self.what, note))

        def apply(delivery: Delivery) -> None:
            changed = tracker.reset(delivery.snapshot) if delivery.snapshot is not None else False
            for kind, pod in delivery.events:
                changed = tracker.apply(kind, pod) or changed
            report(changed, tracker)

        hang = None if self.progress_timeout is None else TriggerHangWatchdog.of_tracker(
            self.progress_timeout, self.namespace, tracker, self.api_client, self._answer, self.log)

        def verdict_now() -> JobVerdict | None:
            found = tracker.verdict(time.time())
            return found if found is not None or hang is None else hang.verdict()

        def wake_in() -> float | None:
            waits = [w for w in (tracker.seconds_to_deadline(time.time()),
                                 hang.wake_in() if hang is not None else None) if w is not None]
            return min(waits) if waits else None

        async with self._feed(JOB_PODS, self.job_name) as feed:
            await self._read(feed, apply, ended=lambda: verdict_now() is not None, wake_in=wake_in,
                             check=hang.check if hang is not None else None)
        verdict = verdict_now() if feed.viewed else None
        if verdict is not None:
            report.flush(tracker, force=True)
        return verdict

    async def _master_log(self) -> MasterLog | None:
        master = self.replicas[0][0]  # slots_to_json: the master first, its name first
        pod = self._tracker.pod(master) if self._tracker is not None else None
        if pod is None or not log_available(pod):
            return None
        return MasterLog(master, str(pod["metadata"].get("uid") or ""), MAIN_CONTAINER)

    def _log_table(self, rows: Any) -> None:
        self.log.info("replicas of %s:\n%s", self.job_name, replica_table(rows))

    # ------------------------------------------------------------------ kill

    async def delete_job(self) -> None:
        """Delete the job's Service; the garbage collector deletes the rest. Gone already is fine."""
        async with self.api_client() as api:
            core = async_client.CoreV1Api(api)

            async def delete() -> None:
                try:
                    await core.delete_namespaced_service(
                        self.job_name, self.namespace,
                        body=async_client.V1DeleteOptions(propagation_policy="Background"),
                    )
                except async_client.ApiException as error:
                    if error.status != 404:
                        raise

            await self._call(delete, f"deleting job {self.namespace}/{self.job_name}")
        self.log.info("deleted job %s/%s (task killed)", self.namespace, self.job_name)

    async def on_kill(self) -> None:
        """Airflow 3.3+: the user killed the deferred task; the job must not keep running."""
        if self._fired:
            return
        await self.delete_job()

    async def cleanup(self) -> None:
        """Before Airflow 3.3 a user kill only reaches ``cleanup()``; it also runs on triggerer restarts, when
        the task is still deferred and the job must keep running, so that case is told apart first."""
        if _AIRFLOW_HAS_TRIGGER_ON_KILL or self._fired:
            return
        try:
            if not await self._task_left_deferral():
                return
            await self.delete_job()
        except Exception:
            self.log.exception("could not clean up job %s/%s", self.namespace, self.job_name)

    async def _task_left_deferral(self) -> bool:
        ti = self.task_instance
        if ti is None:
            return False
        states = await sync_to_async(RuntimeTaskInstance.get_task_states)(
            dag_id=ti.dag_id, task_ids=[ti.task_id], run_ids=[ti.run_id], map_index=ti.map_index
        )
        key = f"{ti.task_id}_{ti.map_index}" if ti.map_index >= 0 else ti.task_id
        state = (states.get(ti.run_id) or {}).get(key)
        return state is not None and state != TaskInstanceState.DEFERRED


__all__ = ["DistributedJobTrigger"]

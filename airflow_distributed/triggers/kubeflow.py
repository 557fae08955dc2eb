"""``KubeflowJobTrigger``: wait in the triggerer for a Kubeflow training job (TFJob, PyTorchJob, MXJob, MPIJob).

One LIST and one watch of the object (``fieldSelector=metadata.name=<job>``), resumed from its resourceVersion
and relisted after 410 Gone (``object_watch``), through ``kubernetes_asyncio``. It fires one event: ``succeeded``
or ``failed`` (with the status's reason and message, ``job_status``), ``deleted``, ``timeout`` (the task's
``execution_timeout``) or ``error``. The operator's or sensor's ``execute_complete`` reads the output.

``delete_on_kill``: the operator's trigger deletes the job when the user kills the deferred task (Airflow 3.3+
``on_kill``); a sensor's does not, since the job is not the sensor's to stop.
"""

from __future__ import annotations

import time
from typing import Any

from airflow.providers.cncf.kubernetes.hooks.kubernetes import AsyncKubernetesHook

from airflow_distributed.hooks.api_retry import acall_with_retries
from airflow_distributed.hooks.object_watch import ObjectWatch, WatchGone, name_selector
from airflow_distributed.manifests.kubeflow_status import job_status
from airflow_distributed.status import FAILED, SUCCEEDED
from airflow_distributed.triggers.base import WATCH_TIMEOUT, JobWaitTrigger, lines


class KubeflowJobTrigger(JobWaitTrigger):
    """Wait for a Kubeflow training job's ``Succeeded`` or ``Failed`` condition without holding a worker slot.

    :param job_name: the object's name.
    :param namespace: its namespace.
    :param group: API group (``kubeflow.org``).
    :param version: API version (``v1``; ``v2beta1`` for MPIJob).
    :param plural: ``tfjobs``, ``pytorchjobs``, ``mxjobs``, ``mpijobs`` or ``xgboostjobs``.
    :param kubernetes_conn_id: the cncf provider's Kubernetes connection.
    :param watch_timeout: server-side timeout of each watch request; the watch resumes after it.
    :param execution_deadline: epoch seconds at which the task's ``execution_timeout`` ends (``timeout`` event).
    :param delete_on_kill: delete the job when the deferred task is killed (the operator's trigger).
    :param started_at: epoch seconds the wait began; handed back in the event.
    """

    group: str
    version: str
    plural: str
    delete_on_kill: bool

    def __init__(
        self,
        *,
        job_name: str,
        namespace: str,
        group: str,
        version: str,
        plural: str,
        kubernetes_conn_id: str | None = AsyncKubernetesHook.default_conn_name,
        watch_timeout: int = WATCH_TIMEOUT,
        execution_deadline: float | None = None,
        delete_on_kill: bool = False,
        started_at: float | None = None,
    ) -> None:
        super().__init__(
            job_name=job_name, namespace=namespace, group=group, version=version, plural=plural,
            kubernetes_conn_id=kubernetes_conn_id, watch_timeout=watch_timeout,
            execution_deadline=execution_deadline, delete_on_kill=delete_on_kill,
            started_at=started_at if started_at is not None else time.time(),
        )

    @property
    def what(self) -> str:
        return f"{self.plural} {self.namespace}/{self.job_name}"

    async def _wait(self) -> dict[str, Any]:
        from kubernetes_asyncio import client as async_client

        watch = ObjectWatch(self.job_name)
        async with self.hook.get_conn() as api:
            custom = async_client.CustomObjectsApi(api)
            failures = 0
            while True:
                if self._deadline_passed():
                    return self._timeout_event()
                try:
                    if watch.needs_list:
                        watch.on_list(await self._list(custom))
                    else:
                        await self._watch_once(custom, watch)
                    failures = 0
                except WatchGone:
                    self.log.info("the watch of %s expired (410 Gone); listing it again", self.what)
                except Exception as error:
                    await self._back_off(error, failures, watch)
                    failures += 1
                if watch.obj is None:
                    if watch.deleted:
                        return {"status": "deleted", "message": f"{self.what} was deleted before it finished"}
                    continue
                status = job_status(watch.obj)
                if status.state in (SUCCEEDED, FAILED):
                    return {"status": status.state, "reason": status.reason, "message": status.message}

    async def _list(self, custom: Any) -> Any:
        async def attempt() -> Any:
            return await custom.list_namespaced_custom_object(
                self.group, self.version, self.namespace, self.plural, field_selector=name_selector(self.job_name))

        return await acall_with_retries(attempt, what=f"watching {self.what}", policy=self.retry, log=self.log)

    async def _watch_once(self, custom: Any, watch: ObjectWatch) -> None:
        response = await self._request(
            f"watching {self.what}",
            lambda: custom.list_namespaced_custom_object(
                self.group, self.version, self.namespace, self.plural,
                field_selector=name_selector(self.job_name), watch=True, resource_version=watch.resource_version,
                allow_watch_bookmarks=True, timeout_seconds=self._until_deadline(max(1, int(self.watch_timeout))),
                _preload_content=False),
        )
        try:
            async for line in lines(response):
                if watch.on_line(line) and (watch.obj is None
                                            or job_status(watch.obj).state in (SUCCEEDED, FAILED)):
                    return
        finally:
            response.close()

    async def on_kill(self) -> None:
        """Airflow 3.3+: the user killed the deferred task; the operator's job must not keep running."""
        if self._fired or not self.delete_on_kill:
            return
        from kubernetes_asyncio import client as async_client

        async with self.hook.get_conn() as api:
            custom = async_client.CustomObjectsApi(api)

            async def delete() -> None:
                try:
                    await custom.delete_namespaced_custom_object(
                        self.group, self.version, self.namespace, self.plural, self.job_name,
                        body=async_client.V1DeleteOptions(propagation_policy="Background"))
                except async_client.ApiException as error:
                    if error.status != 404:
                        raise

            await acall_with_retries(delete, what=f"deleting {self.what}", policy=self.retry, log=self.log)
        self.log.info("deleted %s (task killed)", self.what)


__all__ = ["KubeflowJobTrigger"]

"""``TrainJobTrigger``: wait in the triggerer for a Kubeflow Trainer v2 ``TrainJob``.

The Kubeflow trigger's watch (one LIST and one watch of the object, resumed, relisted after 410 Gone), judging the
object by the TrainJob's ``Complete``/``Failed`` conditions (``trainjob_status``); a ``Suspended`` TrainJob keeps it
waiting. It fires one event: ``succeeded``, ``failed``, ``deleted``, ``timeout`` or ``error``.
"""

from __future__ import annotations

from typing import Any

from airflow.providers.cncf.kubernetes.hooks.kubernetes import AsyncKubernetesHook

from airflow_distributed.manifests.trainjob_status import GROUP, PLURAL, VERSION, trainjob_status
from airflow_distributed.triggers.kubeflow import KubeflowJobTrigger


class TrainJobTrigger(KubeflowJobTrigger):
    """Wait for a TrainJob to complete or fail without holding a worker slot; the arguments are those of
    ``KubeflowJobTrigger``, the resource being ``trainer.kubeflow.org/v1alpha1`` ``trainjobs``."""

    status_of = staticmethod(trainjob_status)

    def __init__(
        self,
        *,
        job_name: str,
        namespace: str,
        group: str = GROUP,
        version: str = VERSION,
        plural: str = PLURAL,
        kubernetes_conn_id: str | None = AsyncKubernetesHook.default_conn_name,
        watch_timeout: int | None = None,
        execution_deadline: float | None = None,
        delete_on_kill: bool = False,
        started_at: float | None = None,
        watch_timings: dict[str, Any] | None = None,
    ) -> None:
        super().__init__(
            job_name=job_name, namespace=namespace, group=group, version=version, plural=plural,
            kubernetes_conn_id=kubernetes_conn_id, watch_timeout=watch_timeout,
            execution_deadline=execution_deadline, delete_on_kill=delete_on_kill, started_at=started_at,
            watch_timings=watch_timings,
        )


__all__ = ["TrainJobTrigger"]

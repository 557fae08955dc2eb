"""What a sensor reads its job with when it pokes: the hook, resource and trigger of a job of the ``kubernetes``
backend (its pods), of a Kubeflow job or of a TrainJob, the same the backend that started the job uses.

``sensors.base`` imports this module at a poke, never when a DAG is parsed: it loads the Kubernetes clients.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import timedelta
from typing import Any

from airflow.providers.standard.triggers.temporal import TimeDeltaTrigger

from airflow_distributed.hooks.kubeflow import KubeflowJobHook, resource_of_kind
from airflow_distributed.hooks.kubernetes import PodJobHook
from airflow_distributed.hooks.trainjob import TRAINJOB, TrainJobHook
from airflow_distributed.jobstate.kubeflow_pods import failed_replica
from airflow_distributed.jobstate.verdicts import JobVerdict
from airflow_distributed.manifests.kubeflow_kinds import KubeflowResource
from airflow_distributed.triggers.kubeflow import KubeflowJobTrigger
from airflow_distributed.triggers.sensors import JobSensorTrigger
from airflow_distributed.triggers.trainjob import TrainJobTrigger


class JobReads:
    """The hooks and triggers of one sensor's job.

    :param kind: ``None`` for a job of the ``kubernetes`` backend, a Kubeflow kind (``PyTorchJob``...) or
        ``TrainJob``.
    """

    def __init__(self, kind: str | None, kubernetes_conn_id: str | None, log: Any) -> None:
        self.kind, self.kubernetes_conn_id, self.log = kind, kubernetes_conn_id, log
        self.trainjob = kind == TRAINJOB.kind

    def pods_hook(self) -> PodJobHook:
        """The hook of a job of the ``kubernetes`` backend (``kind=None``): its pods, read as the operator does."""
        return PodJobHook(kubernetes_conn_id=self.kubernetes_conn_id, logger=self.log)

    def hook(self) -> KubeflowJobHook:
        """The hook of a Kubeflow job or a TrainJob, as the ``kubeflow`` or ``trainjob`` backend's."""
        hook_class = TrainJobHook if self.trainjob else KubeflowJobHook
        return hook_class(kubernetes_conn_id=self.kubernetes_conn_id, logger=self.log)

    def resource(self) -> KubeflowResource:
        return TRAINJOB if self.trainjob else resource_of_kind(str(self.kind))

    @staticmethod
    def failed_replica(pods: Sequence[Mapping[str, Any]], container: str) -> JobVerdict | None:
        return failed_replica(pods, container)

    def kubeflow_trigger(self, **kwargs: Any) -> KubeflowJobTrigger:
        trigger_class = TrainJobTrigger if self.trainjob else KubeflowJobTrigger
        return trigger_class(kubernetes_conn_id=self.kubernetes_conn_id, **kwargs)

    def pods_trigger(self, **kwargs: Any) -> JobSensorTrigger:
        return JobSensorTrigger(kubernetes_conn_id=self.kubernetes_conn_id, **kwargs)

    @staticmethod
    def wait_trigger(seconds: float) -> TimeDeltaTrigger:
        """A trigger that only waits, while there is nothing to watch yet."""
        return TimeDeltaTrigger(timedelta(seconds=seconds))


__all__ = ["JobReads"]

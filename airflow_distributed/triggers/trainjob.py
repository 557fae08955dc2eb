"""``TrainJobTrigger``: wait in the triggerer for a Kubeflow Trainer v2 ``TrainJob``.

The Kubeflow trigger's watch (one LIST and one watch of the object, resumed, relisted after 410 Gone), judging the
object by the TrainJob's ``Complete``/``Failed`` conditions (``trainjob_status``); a ``Suspended`` TrainJob keeps it
waiting, without LISTs of its pods. It fires one event: ``succeeded``, ``failed``, ``deleted``, ``timeout`` or
``error``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from airflow_distributed.manifests.kubeflow_status import JobKind
from airflow_distributed.manifests.trainjob_status import NODE, TRAINJOB_KIND, node_selector
from airflow_distributed.triggers.kubeflow import KubeflowJobTrigger

if TYPE_CHECKING:
    from airflow_distributed.hooks.trainjob import TrainJobHook


class TrainJobTrigger(KubeflowJobTrigger):
    """Wait for a TrainJob to complete or fail without holding a worker slot; the arguments are those of
    ``KubeflowJobTrigger``, with ``group``/``version``/``plural`` those of ``hooks.trainjob.TRAINJOB``
    (``trainer.kubeflow.org``, ``v1alpha1``, ``trainjobs``)."""

    kind: JobKind = TRAINJOB_KIND
    #: The master's log is node 0's (an MPI runtime's launcher's), in its ``node`` container.
    master_selector = staticmethod(lambda obj: node_selector(str((obj.get("metadata") or {}).get("name")), rank=0))
    log_container = staticmethod(lambda obj: NODE)

    @staticmethod
    def hook_class() -> type[TrainJobHook]:
        from airflow_distributed.hooks.trainjob import TrainJobHook

        return TrainJobHook


__all__ = ["TrainJobTrigger"]

"""``TrainJobTrigger``: wait in the triggerer for a Kubeflow Trainer v2 ``TrainJob``.

The Kubeflow trigger's watch (one LIST and one watch of the object, resumed, relisted after 410 Gone), judging the
object by the TrainJob's ``Complete``/``Failed`` conditions (``trainjob_status``); a ``Suspended`` TrainJob keeps it
waiting, without LISTs of its pods. It fires one event: ``succeeded``, ``failed``, ``deleted``, ``timeout`` or
``error``.
"""

from __future__ import annotations

from typing import ClassVar

from airflow_distributed.hooks.kubeflow import KubeflowJobHook
from airflow_distributed.hooks.trainjob import TrainJobHook
from airflow_distributed.manifests.kubeflow_status import JobKind
from airflow_distributed.manifests.trainjob_status import TRAINJOB_KIND
from airflow_distributed.triggers.kubeflow import KubeflowJobTrigger


class TrainJobTrigger(KubeflowJobTrigger):
    """Wait for a TrainJob to complete or fail without holding a worker slot; the arguments are those of
    ``KubeflowJobTrigger``, with ``group``/``version``/``plural`` those of ``hooks.trainjob.TRAINJOB``
    (``trainer.kubeflow.org``, ``v1alpha1``, ``trainjobs``)."""

    kind: JobKind = TRAINJOB_KIND
    hook_class: ClassVar[type[KubeflowJobHook]] = TrainJobHook


__all__ = ["TrainJobTrigger"]

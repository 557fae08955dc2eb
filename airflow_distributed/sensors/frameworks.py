"""One sensor per framework: ``DistributedJobSensor`` with the framework's Kubeflow kind and success rule.

With ``kind=None`` (a job of the ``kubernetes`` backend) every framework succeeds when its master's main container
exits 0 (CONTRACT.md); with ``kind="kubeflow"`` (or the kind by name) the job's own success rule applies
(``kubeflow_status.success_rule``), which also says whose termination message holds the output document:

- ``TensorflowJobSensor`` (``TFJob``): the Chief; a TFJob without one: worker 0 (every worker with
  ``successPolicy: AllWorkers``);
- ``PytorchJobSensor`` (``PyTorchJob``): the Master; without one, every worker (any one, elastic);
- ``MXNetJobSensor`` (``MXJob``): the Scheduler;
- ``HorovodJobSensor`` (``MPIJob``): the Launcher;
- ``XGBoostJobSensor`` (``XGBoostJob``): the Master;
- ``PaddleJobSensor`` (``PaddleJob``): the Master; without one (the operator's collective mode), every worker;
- ``JaxJobSensor``: jobs of the ``kubernetes`` backend only (a JAX job has no Kubeflow resource here).

Every sensor but TensorFlow's and MXNet's also takes ``kind="TrainJob"`` (Kubeflow Trainer v2); ``TrainJobSensor``
is that kind for any framework.
"""

from __future__ import annotations

from typing import Any

from airflow_distributed.sensors.base import TRAINJOB_KIND, DistributedJobSensor


class TensorflowJobSensor(DistributedJobSensor):
    """Wait for a TensorFlow job (``TFJob`` with ``kind="kubeflow"``); see ``DistributedJobSensor``."""

    default_framework = "tensorflow"


class PytorchJobSensor(DistributedJobSensor):
    """Wait for a PyTorch job (``PyTorchJob`` with ``kind="kubeflow"``); see ``DistributedJobSensor``."""

    default_framework = "pytorch"


class MXNetJobSensor(DistributedJobSensor):
    """Wait for an MXNet job (``MXJob`` with ``kind="kubeflow"``); see ``DistributedJobSensor``."""

    default_framework = "mxnet"


class HorovodJobSensor(DistributedJobSensor):
    """Wait for a Horovod job (``MPIJob`` with ``kind="kubeflow"``); see ``DistributedJobSensor``."""

    default_framework = "horovod"


class XGBoostJobSensor(DistributedJobSensor):
    """Wait for an XGBoost job (``XGBoostJob`` with ``kind="kubeflow"``); see ``DistributedJobSensor``."""

    default_framework = "xgboost"


class PaddleJobSensor(DistributedJobSensor):
    """Wait for a PaddlePaddle job (``PaddleJob`` with ``kind="kubeflow"``); see ``DistributedJobSensor``."""

    default_framework = "paddle"


class JaxJobSensor(DistributedJobSensor):
    """Wait for a JAX job of the ``kubernetes`` backend; see ``DistributedJobSensor``."""

    default_framework = "jax"


class TrainJobSensor(DistributedJobSensor):
    """Wait for a Kubeflow Trainer v2 ``TrainJob`` (``kind="TrainJob"``; give ``framework`` to check it); see
    ``DistributedJobSensor``. The result's ``backend`` is ``trainjob``."""

    def __init__(self, *, kind: str | None = TRAINJOB_KIND, **kwargs: Any) -> None:
        if kind != TRAINJOB_KIND:
            raise ValueError(f"TrainJobSensor waits for a TrainJob; kind {kind!r} is not allowed")
        super().__init__(kind=kind, **kwargs)


__all__ = ["HorovodJobSensor", "JaxJobSensor", "MXNetJobSensor", "PaddleJobSensor", "PytorchJobSensor",
           "TensorflowJobSensor", "TrainJobSensor", "XGBoostJobSensor"]

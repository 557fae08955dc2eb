"""Sensors that wait for a distributed training job started elsewhere (``wait_for_completion=False``, Kubeflow)."""

from airflow_distributed.sensors.base import DistributedJobSensor
from airflow_distributed.sensors.frameworks import (
    HorovodJobSensor,
    JaxJobSensor,
    MXNetJobSensor,
    PaddleJobSensor,
    PytorchJobSensor,
    TensorflowJobSensor,
    TrainJobSensor,
    XGBoostJobSensor,
)

__all__ = ["DistributedJobSensor", "HorovodJobSensor", "JaxJobSensor", "MXNetJobSensor", "PaddleJobSensor",
           "PytorchJobSensor", "TensorflowJobSensor", "TrainJobSensor", "XGBoostJobSensor"]

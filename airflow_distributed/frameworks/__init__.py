"""One module per framework; adding one means a new module and a line in ``_REGISTRY``."""

from __future__ import annotations

from airflow_distributed.frameworks.base import Framework, Role
from airflow_distributed.frameworks.horovod import Horovod
from airflow_distributed.frameworks.jax import Jax
from airflow_distributed.frameworks.mxnet import MXNet
from airflow_distributed.frameworks.paddle import Paddle
from airflow_distributed.frameworks.pytorch import PyTorch
from airflow_distributed.frameworks.tensorflow import TensorFlow
from airflow_distributed.frameworks.xgboost import XGBoost

_REGISTRY: dict[str, Framework] = {
    fw.name: fw for fw in (TensorFlow(), MXNet(), PyTorch(), Horovod(), Jax(), XGBoost(), Paddle())
}


def all_frameworks() -> tuple[Framework, ...]:
    """Every framework, in the registry's order."""
    return tuple(_REGISTRY.values())


def get_framework(name: str) -> Framework:
    try:
        return _REGISTRY[name]
    except KeyError:
        raise ValueError(f"unknown framework {name!r}; allowed: {', '.join(_REGISTRY)}") from None


__all__ = ["Framework", "Role", "all_frameworks", "get_framework"]

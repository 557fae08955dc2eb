"""The backends by their ``backend=`` name: the only list of them (the operator's ``BACKENDS`` is its keys).

Adding a backend: a module with a class that follows ``base.Backend``, and one line here.
"""

from __future__ import annotations

from airflow_distributed.backends.base import Backend
from airflow_distributed.backends.kubeflow import KubeflowBackend
from airflow_distributed.backends.kubernetes import KubernetesBackend
from airflow_distributed.backends.local import LocalBackend
from airflow_distributed.backends.ray import RayBackend
from airflow_distributed.backends.trainjob import TrainJobBackend

REGISTRY: dict[str, type[Backend]] = {
    backend.name: backend for backend in (LocalBackend, KubernetesBackend, KubeflowBackend, TrainJobBackend, RayBackend)
}


def backend_named(name: str) -> Backend | None:
    """A new backend object for ``name`` (one per operator: it keeps the state of the job it runs), or ``None``."""
    backend = REGISTRY.get(name) if isinstance(name, str) else None
    return backend() if backend is not None else None


__all__ = ["REGISTRY", "backend_named"]

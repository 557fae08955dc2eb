"""The Polyaxon-style ``environment`` spec: models, loaders and validation (pure, no I/O but reading a spec file)."""

from airflow_distributed.spec.errors import SpecValidationError
from airflow_distributed.spec.loaders import load_spec
from airflow_distributed.spec.models import (
    FRAMEWORKS,
    Environment,
    IndexedReplica,
    PodSettings,
    PSCluster,
    Resources,
    TrainingSpec,
    WorkerCluster,
)

__all__ = [
    "FRAMEWORKS",
    "Environment",
    "IndexedReplica",
    "PSCluster",
    "PodSettings",
    "Resources",
    "SpecValidationError",
    "TrainingSpec",
    "WorkerCluster",
    "load_spec",
]

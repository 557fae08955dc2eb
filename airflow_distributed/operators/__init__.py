"""Operators. ``from airflow_distributed.operators import DistributedTrainingOperator``."""

from airflow_distributed.operators.training import DistributedTrainingOperator

__all__ = ["DistributedTrainingOperator"]

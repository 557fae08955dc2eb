"""Dynamic task mapping: one distributed job per learning rate."""

from __future__ import annotations

from pathlib import Path

import pendulum
from airflow.sdk import DAG

from airflow_distributed.operators import DistributedTrainingOperator

TRAINING_DIR = Path(__file__).resolve().parents[2] / "example_dags" / "training"

with DAG(dag_id="test_sweep", schedule=None, start_date=pendulum.datetime(2026, 1, 1, tz="UTC"), catchup=False):
    DistributedTrainingOperator.partial(
        task_id="train",
        framework="pytorch",
        environment={"pytorch": {"n_workers": 1}},
        command=["python", str(TRAINING_DIR / "pytorch_ddp.py"), "--steps", "10"],
    ).expand(args=[["--lr", "0.01"], ["--lr", "0.1"]])

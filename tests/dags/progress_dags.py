"""A local job slow enough to be seen running: its progress and live record are read while it trains."""

from __future__ import annotations

from pathlib import Path

import pendulum
from airflow.sdk import DAG

from airflow_distributed.operators import DistributedTrainingOperator

TRAINING_DIR = Path(__file__).resolve().parents[2] / "example_dags" / "training"

STEPS = 240

with DAG("test_local_progress", schedule=None, start_date=pendulum.datetime(2026, 1, 1, tz="UTC"), catchup=False,
         tags=["test"], params={"steps": STEPS}):
    DistributedTrainingOperator(
        task_id="train",
        framework="pytorch",
        environment={"pytorch": {"n_workers": 2}},
        command=["python", str(TRAINING_DIR / "pytorch_ddp.py"), "--steps", "{{ params.steps }}",
                 "--sleep-per-step", "0.04"],
    )

"""DAGs for the local backend's failure paths: a replica crashing mid-training, a timeout, a long job to kill."""

from __future__ import annotations

from datetime import timedelta

import pendulum
from airflow.sdk import DAG

from airflow_distributed.example_dags import TRAINING_DIR
from airflow_distributed.operators import DistributedTrainingOperator

SCRIPT = str(TRAINING_DIR / "pytorch_ddp.py")
START = pendulum.datetime(2026, 1, 1, tz="UTC")


def _dag(dag_id: str, args: list[str], **task_kwargs) -> DAG:
    with DAG(dag_id=dag_id, schedule=None, start_date=START, catchup=False, tags=["test"]) as dag:
        DistributedTrainingOperator(
            task_id="train",
            framework="pytorch",
            environment={"pytorch": {"n_workers": 2}},
            command=["python", SCRIPT, *args],
            stop_grace_period=3.0,
            **task_kwargs,
        )
    return dag


slow = ["--steps", "100000", "--sleep-per-step", "0.05"]
worker_crash = _dag("test_worker_crash", [*slow, "--crash-at-step", "5", "--crash-rank", "2"])
master_crash = _dag("test_master_crash", [*slow, "--crash-at-step", "5", "--crash-rank", "0"])
timeout = _dag("test_timeout", slow, execution_timeout=timedelta(seconds=12))
long_running = _dag("test_long_running", slow)

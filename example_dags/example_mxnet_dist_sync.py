"""MXNet ``dist_sync`` on the local backend: scheduler, one server and two workers set up by DMLC_* variables.

MXNet 1.9.1 needs numpy<1.24, so its replicas run in their own virtualenv (``make mxnet`` creates
``.venvs/mxnet``); ``python=`` points the replicas at it. Override it with ``AIRFLOW_DISTRIBUTED_MXNET_PYTHON``.
"""

from __future__ import annotations

import os
from pathlib import Path

import pendulum
from airflow.sdk import DAG, task

from airflow_distributed.operators import DistributedTrainingOperator

# The training scripts sit beside the DAG; resolve() follows the link when the DAGs folder holds one.
TRAINING_DIR = Path(__file__).resolve().parent / "training"

MXNET_PYTHON = os.environ.get(
    "AIRFLOW_DISTRIBUTED_MXNET_PYTHON", str(TRAINING_DIR.parents[1] / ".venvs" / "mxnet" / "bin" / "python")
)

with DAG(
    dag_id="example_mxnet_dist_sync",
    schedule=None,
    start_date=pendulum.datetime(2026, 1, 1, tz="UTC"),
    catchup=False,
    params={"steps": 40},
    tags=["example", "distributed", "mxnet"],
) as dag:
    train = DistributedTrainingOperator(
        task_id="train",
        framework="mxnet",
        environment={"mxnet": {"n_workers": 2, "n_ps": 1}},
        command=["python", str(TRAINING_DIR / "mxnet_dist_sync.py"), "--steps", "{{ params.steps }}"],
        python=MXNET_PYTHON,
    )

    @task
    def report(metrics: dict, model_path: str) -> float:
        print(f"metrics: {metrics}; model saved at {model_path}")
        return metrics["final_loss"]

    report(train.output["metrics"], train.output["model_path"])

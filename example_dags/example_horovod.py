"""Horovod with PyTorch on the local backend: the launcher runs the script under ``horovodrun`` over all replicas.

Needs Horovod in Airflow's environment (``scripts/build-horovod.sh`` builds it for torch 2.13 with Gloo).
"""

from __future__ import annotations

from pathlib import Path

import pendulum
from airflow.sdk import DAG, task

from airflow_distributed.operators import DistributedTrainingOperator

# The training scripts sit beside the DAG; resolve() follows the link when the DAGs folder holds one.
TRAINING_DIR = Path(__file__).resolve().parent / "training"

with DAG(
    dag_id="example_horovod",
    schedule=None,
    start_date=pendulum.datetime(2026, 1, 1, tz="UTC"),
    catchup=False,
    params={"steps": 60},
    tags=["example", "distributed", "horovod"],
) as dag:
    train = DistributedTrainingOperator(
        task_id="train",
        framework="horovod",
        environment={"replicas": {"n_workers": 2}},
        command=["python", str(TRAINING_DIR / "horovod_torch.py"), "--steps", "{{ params.steps }}"],
    )

    @task
    def report(metrics: dict, model_path: str) -> float:
        print(f"rank 0's metrics: {metrics}; model saved at {model_path}")
        return metrics["final_loss"]

    report(train.output["metrics"], train.output["model_path"])

"""TensorFlow MultiWorkerMirroredStrategy on the local backend: a chief and two workers described by TF_CONFIG."""

from __future__ import annotations

from pathlib import Path

import pendulum
from airflow.sdk import DAG, task

from airflow_distributed.operators import DistributedTrainingOperator

# The training scripts sit beside the DAG; resolve() follows the link when the DAGs folder holds one.
TRAINING_DIR = Path(__file__).resolve().parent / "training"

with DAG(
    dag_id="example_tensorflow_multiworker",
    schedule=None,
    start_date=pendulum.datetime(2026, 1, 1, tz="UTC"),
    catchup=False,
    params={"steps": 40},
    tags=["example", "distributed", "tensorflow"],
) as dag:
    train = DistributedTrainingOperator(
        task_id="train",
        framework="tensorflow",
        environment="""
            resources: {cpu: {requests: 1, limits: 1}}
            tensorflow:
              n_workers: 2
              default_worker: {resources: {cpu: {requests: 1, limits: 1}}}
        """,
        command=["python", str(TRAINING_DIR / "tensorflow_multiworker.py"), "--steps", "{{ params.steps }}"],
        env={"TF_CPP_MIN_LOG_LEVEL": "2"},
    )

    @task
    def report(metrics: dict, model_path: str) -> float:
        print(f"chief's metrics: {metrics}; model saved at {model_path}")
        return metrics["final_loss"]

    report(train.output["metrics"], train.output["model_path"])

"""DAGs about what the master reports: a master that writes metrics and no model path (local backend)."""

from __future__ import annotations

import pendulum
from airflow.sdk import DAG, task

from airflow_distributed.operators import DistributedTrainingOperator

START = pendulum.datetime(2026, 1, 1, tz="UTC")
# Reports through the tracking API, as training code does, and never calls log_model.
METRICS_ONLY = "from airflow_distributed import tracking; tracking.log_metrics(loss=0.5, accuracy=0.9)"
NOTHING = "print('trained, reported nothing')"


def _dag(dag_id: str, code: str) -> DAG:
    with DAG(dag_id=dag_id, schedule=None, start_date=START, catchup=False, tags=["test"]) as dag:
        train = DistributedTrainingOperator(
            task_id="train", framework="pytorch", environment={"pytorch": {"n_workers": 1}},
            command=["python", "-c", code], settle_period=0.5,
        )

        @task
        def evaluate(metrics: dict, model_path: str | None) -> dict:
            return {"metrics": metrics, "model_path": model_path}

        evaluate(train.output["metrics"], train.output["model_path"])
    return dag


metrics_only = _dag("local_metrics_only", METRICS_ONLY)
no_output = _dag("local_no_output", NOTHING)

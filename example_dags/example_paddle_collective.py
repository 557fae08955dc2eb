"""PaddlePaddle collective mode on the local backend: a master (trainer 0) and two workers, gradients over gloo.

Every replica is one trainer set up by ``PADDLE_TRAINER_ENDPOINTS``, ``PADDLE_CURRENT_ENDPOINT``,
``PADDLE_TRAINER_ID`` and ``PADDLE_TRAINERS_NUM``. ``paddlepaddle`` pins an ``opt_einsum`` older than the main
environment's, so the replicas run in their own virtualenv (``make paddle`` creates ``.venvs/paddle``); ``python=``
points them at it. Override it with ``AIRFLOW_DISTRIBUTED_PADDLE_PYTHON``.
"""

from __future__ import annotations

import os
from pathlib import Path

import pendulum
from airflow.sdk import DAG, task

from airflow_distributed.operators import DistributedTrainingOperator

# The training scripts sit beside the DAG; resolve() follows the link when the DAGs folder holds one.
TRAINING_DIR = Path(__file__).resolve().parent / "training"

PADDLE_PYTHON = os.environ.get(
    "AIRFLOW_DISTRIBUTED_PADDLE_PYTHON", str(TRAINING_DIR.parents[1] / ".venvs" / "paddle" / "bin" / "python")
)

with DAG(
    dag_id="example_paddle_collective",
    schedule=None,
    start_date=pendulum.datetime(2026, 1, 1, tz="UTC"),
    catchup=False,
    params={"steps": 60},
    tags=["example", "distributed", "paddle"],
) as dag:
    train = DistributedTrainingOperator(
        task_id="train",
        framework="paddle",
        environment={"paddle": {"n_workers": 2}},
        command=["python", str(TRAINING_DIR / "paddle_collective.py"), "--steps", "{{ params.steps }}"],
        python=PADDLE_PYTHON,
        # Paddle's C++ logging (glog) would otherwise fill the task log with start-up lines.
        env={"GLOG_minloglevel": "2"},
    )

    @task
    def report(metrics: dict, model_path: str) -> float:
        print(f"metrics: {metrics}; model saved at {model_path}")
        return metrics["final_loss"]

    report(train.output["metrics"], train.output["model_path"])

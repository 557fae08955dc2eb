"""PaddlePaddle parameter-server mode on the local backend: two pservers, a master (trainer 0) and one worker.

``n_ps: 2`` chooses the mode. Every replica is set up by ``TRAINING_ROLE``, ``PADDLE_PSERVERS_IP_PORT_LIST``,
``PADDLE_TRAINER_ENDPOINTS``, ``PADDLE_TRAINERS_NUM``, ``PADDLE_TRAINER_ID``, ``POD_IP`` and ``PADDLE_PORT``; the
trainers push gradients to the pservers and pull the parameters back, and the master's end decides the job (the
pservers, which serve until stopped, are stopped then). The Paddle 3 CPU wheels have no parameter-server core, so the
replicas run Paddle 2.6.2 from their own virtualenv (``make paddle-ps`` creates ``.venvs/paddle-ps``); ``python=``
points them at it. Override it with ``AIRFLOW_DISTRIBUTED_PADDLE_PS_PYTHON``.
"""

from __future__ import annotations

import os
from pathlib import Path

import pendulum
from airflow.sdk import DAG, task

from airflow_distributed.operators import DistributedTrainingOperator

# The training scripts sit beside the DAG; resolve() follows the link when the DAGs folder holds one.
TRAINING_DIR = Path(__file__).resolve().parent / "training"

PADDLE_PS_PYTHON = os.environ.get(
    "AIRFLOW_DISTRIBUTED_PADDLE_PS_PYTHON",
    str(TRAINING_DIR.parents[1] / ".venvs" / "paddle-ps" / "bin" / "python"),
)

with DAG(
    dag_id="example_paddle_ps",
    schedule=None,
    start_date=pendulum.datetime(2026, 1, 1, tz="UTC"),
    catchup=False,
    params={"steps": 60},
    tags=["example", "distributed", "paddle"],
) as dag:
    train = DistributedTrainingOperator(
        task_id="train",
        framework="paddle",
        environment={"paddle": {"n_ps": 2, "n_workers": 1}},
        command=["python", str(TRAINING_DIR / "paddle_ps.py"), "--steps", "{{ params.steps }}"],
        python=PADDLE_PS_PYTHON,
        # Paddle's C++ logging (glog) would otherwise fill the task log with start-up lines.
        env={"GLOG_minloglevel": "2"},
    )

    @task
    def report(metrics: dict, model_path: str) -> float:
        print(f"metrics: {metrics}; model saved at {model_path}")
        return metrics["final_loss"]

    report(train.output["metrics"], train.output["model_path"])

"""PyTorch DistributedDataParallel on the local backend: a master and two workers, no cluster needed.

The three replicas train one model over gloo (gradients all-reduced every step); the master reports the
losses and saves ``model.pt``; a downstream task reads both from XCom.
"""

from __future__ import annotations

import os
from pathlib import Path

import pendulum
from airflow.sdk import DAG, task

from airflow_distributed.operators import DistributedTrainingOperator

# The training scripts sit beside the DAG; resolve() follows the link when the DAGs folder holds one.
TRAINING_DIR = Path(__file__).resolve().parent / "training"

with DAG(
    dag_id="example_pytorch_ddp",
    schedule=None,
    start_date=pendulum.datetime(2026, 1, 1, tz="UTC"),
    catchup=False,
    params={"steps": 60, "lr": 0.05},
    tags=["example", "distributed", "pytorch"],
) as dag:
    train = DistributedTrainingOperator(
        task_id="train",
        framework="pytorch",
        environment={
            "resources": {"cpu": {"requests": 1, "limits": 1}, "memory": {"requests": 256, "limits": 1024}},
            "pytorch": {
                "n_workers": 2,
                "default_worker": {"resources": {"cpu": {"requests": 1, "limits": 1}}},
            },
        },
        command=["python", str(TRAINING_DIR / "pytorch_ddp.py")],
        args=["--steps", "{{ params.steps }}", "--lr", "{{ params.lr }}"],
    )

    @task
    def report(metrics: dict, model_path: str) -> dict:
        """What an evaluation step sees: the master's metrics and a model file it can load."""
        if not os.path.exists(model_path):
            raise FileNotFoundError(f"no model at {model_path}")
        print(f"metrics: {metrics}")
        print(f"model path: {model_path}")
        if not metrics["final_loss"] < metrics["initial_loss"]:
            raise ValueError(f"loss did not go down: {metrics}")
        return {"final_loss": metrics["final_loss"], "model_path": model_path}

    report(train.output["metrics"], train.output["model_path"])

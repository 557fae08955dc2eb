"""The model as an Asset: a training DAG emits it, a deploy DAG is scheduled on it and reads the event's extra."""

from __future__ import annotations

from pathlib import Path

import pendulum
from airflow.sdk import DAG, Asset, task

from airflow_distributed.operators import DistributedTrainingOperator

TRAINING_DIR = Path(__file__).resolve().parents[2] / "example_dags" / "training"

START = pendulum.datetime(2026, 1, 1, tz="UTC")
MODEL = Asset("s3://models/test_asset_train/train")

with DAG("test_asset_train", schedule=None, start_date=START, catchup=False, tags=["test"]):
    DistributedTrainingOperator(
        task_id="train",
        framework="pytorch",
        environment={"pytorch": {"n_workers": 1}},
        command=["python", str(TRAINING_DIR / "pytorch_ddp.py"), "--steps", "20"],
        model_asset="s3://models/{dag_id}/{task_id}",
    )

with DAG("test_asset_per_run", schedule=None, start_date=START, catchup=False, tags=["test"]):
    DistributedTrainingOperator(
        task_id="train",
        framework="pytorch",
        environment={"pytorch": {"n_workers": 1}},
        command=["python", str(TRAINING_DIR / "pytorch_ddp.py"), "--steps", "10"],
        model_asset="s3://models/{dag_id}/{job_name}",
    )

with DAG("test_asset_deploy", schedule=[MODEL], start_date=START, catchup=False, tags=["test"]):

    @task(inlets=[MODEL])
    def deploy(*, inlet_events=None) -> dict:
        """What a deploy step sees: the newest model's path and metrics, from the asset event."""
        extra = inlet_events[MODEL][-1].extra
        print(f"deploying {extra['model_path']} with final loss {extra['metrics']['final_loss']}")
        return {"model_path": extra["model_path"], "final_loss": extra["metrics"]["final_loss"]}

    deploy()

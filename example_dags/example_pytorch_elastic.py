"""Elastic PyTorch on the local backend: three replicas under torch's elastic agent, resuming from checkpoints.

``environment.pytorch.elastic`` runs every replica under ``torchrun`` with a c10d rendezvous hosted by the master.
A training process that dies is restarted by its replica's agent (up to ``max_restarts`` times), the group forms
again, and the script goes on from its last checkpoint (``--checkpoint-every``) instead of failing the task. A
replica that is lost as a whole (its agent killed) is started again by the task within the same budget; with
fewer than ``min_workers`` replicas left the task fails and says so.
"""

from __future__ import annotations

from pathlib import Path

import pendulum
from airflow.sdk import DAG

from airflow_distributed.operators import DistributedTrainingOperator

TRAINING_DIR = Path(__file__).resolve().parent / "training"

with DAG(
    dag_id="example_pytorch_elastic",
    schedule=None,
    start_date=pendulum.datetime(2026, 1, 1, tz="UTC"),
    catchup=False,
    params={"steps": 300},
    tags=["example", "distributed", "pytorch", "elastic"],
) as dag:
    DistributedTrainingOperator(
        task_id="train",
        framework="pytorch",
        environment={
            "pytorch": {
                "n_workers": 2,
                # Replicas (master included): training needs all three, each may be restarted twice.
                "elastic": {"min_workers": 3, "max_workers": 3, "max_restarts": 2, "rdzv_timeout": 300},
            },
        },
        command=["python", str(TRAINING_DIR / "pytorch_ddp.py")],
        args=["--steps", "{{ params.steps }}", "--checkpoint-every", "10"],
    )

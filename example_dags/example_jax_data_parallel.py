"""JAX multi-process data parallelism on the local backend: a master (process 0, the coordinator) and two workers.

Every replica is one JAX process; ``jax.distributed.initialize`` takes the contract's ``JAX_COORDINATOR_ADDRESS``,
``JAX_NUM_PROCESSES`` and ``JAX_PROCESS_ID``. The gradients of the three processes are summed by a ``psum`` over
gloo every step; the master reports the losses and the ``psum`` check and saves ``model.npz``. Needs the ``jax``
extra (``pip install airflow-distributed[jax]``); without it the DAG still parses.
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
    dag_id="example_jax_data_parallel",
    schedule=None,
    start_date=pendulum.datetime(2026, 1, 1, tz="UTC"),
    catchup=False,
    params={"steps": 60, "lr": 0.05},
    tags=["example", "distributed", "jax"],
) as dag:
    train = DistributedTrainingOperator(
        task_id="train",
        framework="jax",
        environment={
            "resources": {"cpu": {"requests": 1, "limits": 1}},
            "jax": {"n_workers": 2, "default_worker": {"resources": {"cpu": {"requests": 1, "limits": 1}}}},
        },
        command=["python", str(TRAINING_DIR / "jax_data_parallel.py")],
        args=["--steps", "{{ params.steps }}", "--lr", "{{ params.lr }}"],
    )

    @task
    def report(metrics: dict, model_path: str) -> dict:
        """What an evaluation step sees: the master's metrics and the saved parameters."""
        if not os.path.exists(model_path):
            raise FileNotFoundError(f"no model at {model_path}")
        if metrics["psum"] != metrics["psum_expected"]:
            raise ValueError(f"the processes did not all take part in the psum: {metrics}")
        print(f"metrics: {metrics}; model saved at {model_path}")
        return {"final_loss": metrics["final_loss"], "model_path": model_path}

    report(train.output["metrics"], train.output["model_path"])

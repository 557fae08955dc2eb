"""DAGs for elastic PyTorch: a 3-replica job whose worker the test kills mid-training, and the same job unkilled."""

from __future__ import annotations

from pathlib import Path

import pendulum
from airflow.sdk import DAG

from airflow_distributed.operators import DistributedTrainingOperator

TRAINING_DIR = Path(__file__).resolve().parents[2] / "example_dags" / "training"

SCRIPT = str(TRAINING_DIR / "pytorch_ddp.py")
START = pendulum.datetime(2026, 1, 1, tz="UTC")
# 10 batches per epoch (512 samples, 3 ranks, batch 16): a checkpoint every epoch makes a resumed run see the same
# batches as an uninterrupted one, so their losses agree to rounding.
STEPS, EVERY = 300, 10
ARGS = ["--steps", str(STEPS), "--checkpoint-every", str(EVERY), "--sleep-per-step", "0.02", "--timeout", "60"]


def _dag(dag_id: str, elastic: dict | None) -> DAG:
    pytorch: dict = {"n_workers": 2}
    if elastic is not None:
        pytorch["elastic"] = elastic
    with DAG(dag_id=dag_id, schedule=None, start_date=START, catchup=False, tags=["test"]) as dag:
        DistributedTrainingOperator(
            task_id="train",
            framework="pytorch",
            environment={"pytorch": pytorch},
            command=["python", SCRIPT, *ARGS],
            keep_checkpoints=True,
            stop_grace_period=3.0,
        )
    return dag


elastic = _dag("test_elastic_restart", {"max_restarts": 1, "rdzv_timeout": 60})
agent_lost = _dag("test_elastic_agent_lost", {"max_restarts": 1, "rdzv_timeout": 60})
no_restarts = _dag("test_elastic_no_restarts", {"max_restarts": 0, "rdzv_timeout": 60})
reference = _dag("test_elastic_reference", None)

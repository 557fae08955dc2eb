"""DAGs for checkpoints that survive tries: a job that crashes mid-training in its first try and is retried."""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path

import pendulum
from airflow.sdk import DAG

from airflow_distributed.operators import DistributedTrainingOperator

TRAINING_DIR = Path(__file__).resolve().parents[2] / "example_dags" / "training"

SCRIPT = str(TRAINING_DIR / "pytorch_ddp.py")
START = pendulum.datetime(2026, 1, 1, tz="UTC")
STEPS, CRASH_AT, EVERY = 60, 45, 10


def _dag(dag_id: str, extra: list[str], **task_kwargs) -> DAG:
    with DAG(dag_id=dag_id, schedule=None, start_date=START, catchup=False, tags=["test"]) as dag:
        DistributedTrainingOperator(
            task_id="train",
            framework="pytorch",
            environment={"pytorch": {"n_workers": 2}},
            command=["python", SCRIPT, "--steps", str(STEPS), "--checkpoint-every", str(EVERY), *extra],
            retries=1,
            retry_delay=timedelta(seconds=0),
            stop_grace_period=3.0,
            **task_kwargs,
        )
    return dag


# A worker dies at step 45 of the first try only; the retry resumes from the checkpoint of step 40.
resumed = _dag("test_checkpoint_resume", ["--crash-at-step", str(CRASH_AT), "--crash-rank", "2", "--crash-on-try", "1"])
# The same job without a crash, for the reference loss.
uninterrupted = _dag("test_checkpoint_reference", [], keep_checkpoints=True)

# A quick job in a checkpoint directory given by the run's conf (a shared volume's root, say): it saves checkpoints
# on the master (and one per replica) when the conf says so, else none.
SAVER = """
import sys
from airflow_distributed import tracking
for step in range(1, int(sys.argv[1]) + 1):
    tracking.save_checkpoint({"step": step}, step, keep=2)
    tracking.save_checkpoint({"mine": step}, step, keep=2, every_replica=True)
tracking.log_metrics(saved=int(sys.argv[1]))
"""


def _shared_dag(dag_id: str, steps: int) -> DAG:
    with DAG(dag_id=dag_id, schedule=None, start_date=START, catchup=False, tags=["test"]) as dag:
        DistributedTrainingOperator(
            task_id="train",
            framework="pytorch",
            environment={"pytorch": {"n_workers": 1}},
            command=["python", "-c", SAVER, str(steps)],
            checkpoint_dir="{{ dag_run.conf['checkpoint_dir'] }}",
            stop_grace_period=3.0,
        )
    return dag


shared_none = _shared_dag("test_checkpoint_shared_none", 0)
shared_some = _shared_dag("test_checkpoint_shared_some", 3)

"""DAGs of several processes per replica (``environment.pytorch.n_proc_per_node``) on the local backend: the DDP
example trained by 2 replicas of 3 processes each, every process printing its rank variables first; a replica of 3
processes that hangs."""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path

import pendulum
from airflow.sdk import DAG

from airflow_distributed.operators import DistributedTrainingOperator
from tests.hang_scripts import GLOO_HANG
from tests.process_variables import PRELUDE

START = pendulum.datetime(2026, 1, 1, tz="UTC")
SCRIPT = str(Path(__file__).resolve().parents[2] / "example_dags" / "training" / "pytorch_ddp.py")

with DAG(dag_id="local_nproc_ddp", schedule=None, start_date=START, catchup=False, tags=["test"]):
    DistributedTrainingOperator(
        task_id="train", framework="pytorch",
        environment={"resources": {"cpu": {"limits": 1}}, "pytorch": {"n_workers": 1, "n_proc_per_node": 3}},
        command=["python", "-c", PRELUDE, SCRIPT], args=["--steps", "5", "--timeout", "60"],
        settle_period=0.2, log_replicas="all")

# One replica of 3 processes, 2 blocked in a gloo all-reduce that the third never joins: the hang watchdog asks
# every process of the replica for its stacks.
with DAG(dag_id="local_nproc_hung", schedule=None, start_date=START, catchup=False, tags=["test"]):
    DistributedTrainingOperator(
        task_id="train", framework="pytorch", environment={"pytorch": {"n_workers": 0, "n_proc_per_node": 3}},
        command=["python", "-c", GLOO_HANG], progress_timeout=timedelta(seconds=10), stop_grace_period=3.0,
        retries=0)

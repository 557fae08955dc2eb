"""DAGs of the tests on the real node (``tests/kube_node``): the example PyTorch DDP script trained by a master and
two workers in real pods, sync and deferrable. The images are the node's (``scripts/build-kube-node-images.sh``),
named by the fixture through the environment; the namespace is the DAG id's."""

from __future__ import annotations

import os

import pendulum
from airflow.sdk import DAG

from airflow_distributed.operators import DistributedTrainingOperator

START = pendulum.datetime(2026, 1, 1, tz="UTC")
#: Where the trainer image holds the example training scripts.
TRAINING_DIR = "/opt/airflow-distributed/training"


def trainer_image() -> str:
    # Parsed outside a node session too (every DAG file is): a placeholder then, which no test runs.
    return os.environ.get("KUBE_NODE_TRAINER_IMAGE", "127.0.0.1:5000/airflow-distributed/trainer:unbuilt")


for dag_id, deferrable in (("node_ddp", False), ("node_ddp_deferrable", True)):
    with DAG(dag_id=dag_id, schedule=None, start_date=START, catchup=False, tags=["test", "kubernetes"]):
        DistributedTrainingOperator(
            task_id="train", framework="pytorch", image=trainer_image(), backend="kubernetes",
            command=["python3", f"{TRAINING_DIR}/pytorch_ddp.py"], args=["--steps", "20"],
            environment={"resources": {"cpu": {"requests": 0.1}, "memory": {"requests": 64, "limits": 1024}},
                         "pytorch": {"n_workers": 2}},
            namespace=dag_id.replace("_", "-"), deferrable=deferrable, startup_timeout=180, logging_interval=1,
            # Every replica's lines in the task log (followed by the synchronous wait; deferred, the master's only).
            log_replicas="all")

"""DAGs for fault tolerance on the Kubernetes backend: the task recreates a lost worker pod of an elastic job within
the budget; a retried job finds the checkpoints of the failed try."""

from __future__ import annotations

import os
from datetime import timedelta

import pendulum
from airflow.sdk import DAG

from airflow_distributed.operators import DistributedTrainingOperator

IMAGE = "registry.example.com/trainer:1.0"
START = pendulum.datetime(2026, 1, 1, tz="UTC")


def namespace_of(dag_id: str) -> str:
    return dag_id.replace("_", "-")


def _dag(dag_id: str, max_restarts: int, min_workers: int | None = None, **task_kwargs) -> DAG:
    elastic = {"max_restarts": max_restarts, **({"min_workers": min_workers} if min_workers is not None else {})}
    with DAG(dag_id=dag_id, schedule=None, start_date=START, catchup=False, tags=["test", "kubernetes"]) as dag:
        DistributedTrainingOperator(
            task_id="train",
            framework="pytorch",
            environment={"pytorch": {"n_workers": 2, "elastic": elastic}},
            command=["python", "/opt/jobs/train.py"],
            image=IMAGE,
            backend="kubernetes",
            namespace=namespace_of(dag_id),
            startup_timeout=30.0,
            **task_kwargs,
        )
    return dag


elastic = _dag("k8s_elastic", 1)
elastic_no_restarts = _dag("k8s_elastic_no_restarts", 0)
# The trigger reports the lost worker; the resumed task recreates its pod and defers again.
elastic_deferrable = _dag("k8s_elastic_deferrable", 1, deferrable=True)
# No restarts, but two replicas are enough: a lost worker is left out and the job carries on without it.
elastic_carry_on = _dag("k8s_elastic_carry_on", 0, min_workers=2)
elastic_carry_on_deferrable = _dag("k8s_elastic_carry_on_deferrable", 0, min_workers=2, deferrable=True)

# Retried once; the checkpoints live where the test (playing the pods) can reach them, the same for both tries.
checkpoint_retry = _dag("k8s_checkpoint_retry", 0, retries=1, retry_delay=timedelta(seconds=0),
                        checkpoint_dir=os.path.join(os.environ.get("AIRFLOW_HOME", "/tmp"), "k8s-checkpoints"))

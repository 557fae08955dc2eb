"""DAGs whose jobs ask for resources, for the ``usage`` figures: a local job of real processes, and Kubernetes jobs
(sync and deferred) whose pods the test ends at times it chooses, and a deferred one whose live view is read while it
runs."""

from __future__ import annotations

from datetime import timedelta

import pendulum
from airflow.sdk import DAG

from airflow_distributed.operators import DistributedTrainingOperator

START = pendulum.datetime(2026, 1, 1, tz="UTC")
#: The master asks for 1.5 cores and 2 GiB (a limit of 2 cores), each worker for 1 core and 1 GiB.
ENVIRONMENT = {
    "resources": {"cpu": {"requests": 1.5, "limits": 2}, "memory": {"requests": 2048}},
    "pytorch": {"n_workers": 1,
                "default_worker": {"resources": {"cpu": {"requests": 1}, "memory": {"requests": 1024}}}},
}
#: On Kubernetes the master also asks for 2 GPUs.
GPU_ENVIRONMENT = {**ENVIRONMENT, "resources": {**ENVIRONMENT["resources"], "gpu": {"limits": 2}}}
# The master fails at its first try and succeeds at its second: usage is summed over both.
FLAKY = ("import os, sys, time; time.sleep(0.3);"
         " sys.exit(1 if os.environ.get('AIRFLOW_DISTRIBUTED_TRY_NUMBER') == '1'"
         " and os.environ.get('AIRFLOW_DISTRIBUTED_OUTPUT') else 0)")


def namespace_of(dag_id: str) -> str:
    return dag_id.replace("_", "-")


with DAG(dag_id="local_usage", schedule=None, start_date=START, catchup=False, tags=["test"]) as local_usage:
    DistributedTrainingOperator(task_id="train", framework="pytorch", environment=ENVIRONMENT,
                                command=["python", "-c", FLAKY], settle_period=0.2, retries=1,
                                retry_delay=timedelta(0))


def _kubernetes_dag(dag_id: str, **task_kwargs) -> DAG:
    with DAG(dag_id=dag_id, schedule=None, start_date=START, catchup=False, tags=["test", "kubernetes"]) as dag:
        DistributedTrainingOperator(task_id="train", framework="pytorch", environment=GPU_ENVIRONMENT,
                                    command=["python", "/opt/jobs/train.py"], image="registry.example.com/t:1",
                                    backend="kubernetes", namespace=namespace_of(dag_id), startup_timeout=30.0,
                                    **task_kwargs)
    return dag


kubernetes_usage = _kubernetes_dag("k8s_usage")
kubernetes_usage_deferrable = _kubernetes_dag("k8s_usage_deferrable", deferrable=True)
# The live view of a deferred job: the test reads the job view while the task waits in the triggerer.
kubernetes_live = _kubernetes_dag("k8s_live")
kubernetes_live_deferrable = _kubernetes_dag("k8s_live_deferrable", deferrable=True)

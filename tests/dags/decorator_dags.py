"""A ``@task.distributed`` DAG for the Kubernetes backend's tests (the test plays the kubelet)."""

from __future__ import annotations

import pendulum
from airflow.sdk import DAG, task

# Not imported from kubernetes_dags: importing that file here would define its DAGs a second time.
IMAGE = "registry.example.com/trainer:1.0"

with DAG("k8s_task_distributed", schedule=None, start_date=pendulum.datetime(2026, 1, 1, tz="UTC"),
         catchup=False, tags=["test", "kubernetes"]) as dag:

    @task.distributed(framework="pytorch", environment={"pytorch": {"n_workers": 2}}, backend="kubernetes",
                      image=IMAGE, namespace="k8s-task-distributed", startup_timeout=30.0)
    def add(a: int, b: str) -> dict:
        import os

        return {"sum": a + int(b), "rank": int(os.environ["RANK"]), "world_size": int(os.environ["WORLD_SIZE"])}

    @task
    def downstream(value: dict) -> int:
        return value["sum"]

    downstream(add(2, "{{ dag_run.conf.get('b', 3) }}"))

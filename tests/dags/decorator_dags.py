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

# On the local backend: the function reports how its files are stored (the test passes a secret in the run's conf).
with DAG("local_task_distributed_secret", schedule=None, start_date=pendulum.datetime(2026, 1, 1, tz="UTC"),
         catchup=False, tags=["test"]) as local_dag:

    @task.distributed(framework="pytorch", environment={"pytorch": {"n_workers": 1}}, stop_grace_period=3.0)
    def stored(token: str) -> dict:
        import os
        import stat
        import sys

        paths = {"script": sys.argv[0], "arguments": sys.argv[1], "files": os.path.dirname(sys.argv[1]),
                 "work": os.getcwd()}
        return {"modes": {name: oct(stat.S_IMODE(os.stat(path).st_mode)) for name, path in paths.items()},
                "paths": paths, "token_length": len(token)}

    stored("{{ dag_run.conf['token'] }}")

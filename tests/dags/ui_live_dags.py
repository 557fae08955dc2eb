"""The DAG of the job view's live Kubernetes tests: a job started and left running, as the view finds it.

Its connection is one the test defines (team-scoped in the view's tests) and its namespace is a template, so the
view has to take it from the task instance's rendered fields.
"""

from __future__ import annotations

import pendulum
from airflow.sdk import DAG

from airflow_distributed.operators import DistributedTrainingOperator

DAG_ID, CONN_ID, NAMESPACE = "ui_live_kubernetes", "ui_live_kubernetes", "ui-live-kubernetes"

with DAG(dag_id=DAG_ID, schedule=None, start_date=pendulum.datetime(2026, 1, 1, tz="UTC"), catchup=False,
         tags=["test", "kubernetes"]):
    DistributedTrainingOperator(
        task_id="train",
        framework="pytorch",
        environment={"pytorch": {"n_workers": 2}},
        command=["python", "/opt/jobs/train.py"],
        image="registry.example.com/trainer:1.0",
        backend="kubernetes",
        kubernetes_conn_id=CONN_ID,
        namespace="{{ dag.dag_id | replace('_', '-') }}",
        wait_for_completion=False,
    )

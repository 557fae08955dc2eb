"""DAGs for the ``kubeflow`` backend's tests; each job runs in a namespace of its own of the API emulator.

The tests play the Kubeflow Training Operator: they create the pods of the submitted object, move them, and
write its ``status.conditions``. ``namespace_of(dag_id)`` is the namespace a DAG uses.
"""

from __future__ import annotations

from datetime import timedelta

import pendulum
from airflow.sdk import DAG, task

from airflow_distributed.operators import DistributedTrainingOperator

IMAGE = "registry.example.com/trainer:1.0"
START = pendulum.datetime(2026, 1, 1, tz="UTC")


def namespace_of(dag_id: str) -> str:
    return dag_id.replace("_", "-")


def _dag(dag_id: str, *, report: bool = False, framework: str = "pytorch", **task_kwargs) -> DAG:
    with DAG(dag_id=dag_id, schedule=None, start_date=START, catchup=False, tags=["test", "kubeflow"]) as dag:
        train = DistributedTrainingOperator(
            task_id="train",
            framework=framework,
            environment={framework: {"n_workers": 2}},
            command=["python", "/opt/jobs/train.py"],
            args=["--steps", "{{ params.steps }}"],
            params={"steps": 5},
            image=IMAGE,
            backend="kubeflow",
            namespace=namespace_of(dag_id),
            **task_kwargs,
        )
        if report:

            @task
            def report_metrics(metrics: dict, model_path: str | None) -> dict:
                return {"loss": metrics["loss"], "model_path": model_path}

            report_metrics(train.output["metrics"], train.output["model_path"])
    return dag


success = _dag("kubeflow_success", report=True)
deferrable = _dag("kubeflow_deferrable", deferrable=True)
# The master reports metrics and no model path: the downstream task still runs, with None.
metrics_only = _dag("kubeflow_metrics_only", report=True, deferrable=True)
failure = _dag("kubeflow_failure")
long_running = _dag("kubeflow_long_running", execution_timeout=timedelta(minutes=5))
xgboost = _dag("kubeflow_xgboost", framework="xgboost")
paddle = _dag("kubeflow_paddle", framework="paddle")
# A replica's image cannot be pulled: the job's status never says so; the wait's pod LISTs do (every 0.3 s here).
# execution_timeout bounds a wait that would not see it (the Kubeflow backend has no startup timeout of its own).
image_pull = _dag("kubeflow_image_pull", execution_timeout=timedelta(seconds=90),
                  watch_timings={"pending_pods_interval": 0.3})
image_pull_deferrable = _dag("kubeflow_image_pull_deferrable", deferrable=True, execution_timeout=timedelta(seconds=90),
                             watch_timings={"pending_pods_interval": 0.3})
invalid_image = _dag("kubeflow_invalid_image", deferrable=True, execution_timeout=timedelta(seconds=90),
                     watch_timings={"pending_pods_interval": 0.3})
image_pull_grace_over = _dag("kubeflow_image_pull_grace_over", execution_timeout=timedelta(seconds=90),
                             image_pull_grace=1.0, watch_timings={"pending_pods_interval": 0.3})
pending_pods = _dag("kubeflow_pending_pods", watch_timings={"pending_pods_interval": 0.2})
# Suspended (as Kueue holds a job), then resumed: no pod LISTs meanwhile, however short their pace.
suspended = _dag("kubeflow_suspended", execution_timeout=timedelta(seconds=120),
                 watch_timings={"pending_pods_interval": 0.2})
suspended_deferrable = _dag("kubeflow_suspended_deferrable", deferrable=True, execution_timeout=timedelta(seconds=120),
                            watch_timings={"pending_pods_interval": 0.2})

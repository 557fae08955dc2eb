"""DAGs for the Kubernetes backend's tests; each job runs in a namespace of its own of the API emulator.

The tests play the kubelet: nothing here runs a container. ``namespace_of(dag_id)`` is the namespace a DAG
uses (the test creates it); the connection is ``kubernetes_default``, which the tests point at the emulator.
"""

from __future__ import annotations

from datetime import timedelta

import pendulum
from airflow.sdk import DAG, task

from airflow_distributed.operators import DistributedTrainingOperator

IMAGE = "registry.example.com/trainer:1.0"
START = pendulum.datetime(2026, 1, 1, tz="UTC")
ENVIRONMENT = {"pytorch": {"n_workers": 2}}
#: The emulator's pods never start unless the test says so: a short window keeps the startup tests fast.
SHORT_STARTUP = 2.0


def namespace_of(dag_id: str) -> str:
    return dag_id.replace("_", "-")


def _dag(dag_id: str, *, report: bool = False, **task_kwargs) -> DAG:
    task_kwargs.setdefault("startup_timeout", 30.0)
    with DAG(dag_id=dag_id, schedule=None, start_date=START, catchup=False, tags=["test", "kubernetes"]) as dag:
        train = DistributedTrainingOperator(
            task_id="train",
            framework="pytorch",
            environment=ENVIRONMENT,
            command=["python", "/opt/jobs/train.py"],
            args=["--steps", "{{ params.steps }}"],
            params={"steps": 5},
            image=IMAGE,
            backend="kubernetes",
            namespace=namespace_of(dag_id),
            **task_kwargs,
        )
        if report:

            @task
            def report_metrics(metrics: dict, model_path: str | None) -> dict:
                return {"loss": metrics["loss"], "model_path": model_path}

            report_metrics(train.output["metrics"], train.output["model_path"])
    return dag


success = _dag("k8s_success", report=True)
deferrable = _dag("k8s_deferrable", deferrable=True)
# Its workers end a moment after the master (one of them never does): the clean-up gives them 2 s to end.
workers_end_after = _dag("k8s_workers_end_after", watch_timings={"finish_grace": 2})
workers_end_after_deferrable = _dag("k8s_workers_end_after_deferrable", deferrable=True,
                                    watch_timings={"finish_grace": 2})
# A worker the kubelet reports only after the master ended (a real kubelet reports a short replica's run late):
# the clean-up looks again at those last seen starting, within the same 2 s.
late_report = _dag("k8s_late_report", watch_timings={"finish_grace": 2})
late_report_deferrable = _dag("k8s_late_report_deferrable", deferrable=True, watch_timings={"finish_grace": 2})
# The master reports metrics and no model path: the downstream task still runs, with None.
metrics_only = _dag("k8s_metrics_only", report=True)
metrics_only_deferrable = _dag("k8s_metrics_only_deferrable", report=True, deferrable=True)
# The master's report is not strict JSON (NaN, Infinity): a retry would run the training again, and must not happen.
bad_report = _dag("k8s_bad_report", report=True, retries=1, retry_delay=timedelta(0))
bad_report_deferrable = _dag("k8s_bad_report_deferrable", report=True, deferrable=True, retries=1,
                             retry_delay=timedelta(0))
worker_failure = _dag("k8s_worker_failure")
master_oom = _dag("k8s_master_oom", clean_pod_policy="all")
unschedulable = _dag("k8s_unschedulable", startup_timeout=SHORT_STARTUP)
# A failed pull is told at once: the startup window is one no test waits out.
image_pull = _dag("k8s_image_pull", startup_timeout=600.0)
image_pull_recovers = _dag("k8s_image_pull_recovers", startup_timeout=600.0, image_pull_grace=600.0)
image_pull_grace_over = _dag("k8s_image_pull_grace_over", startup_timeout=600.0, image_pull_grace=1.0,
                             deferrable=True)
long_running = _dag("k8s_long_running", execution_timeout=timedelta(minutes=5))
reattach = _dag("k8s_reattach")
no_wait = _dag("k8s_no_wait", wait_for_completion=False)


def _horovod_dag(dag_id: str, **task_kwargs) -> DAG:
    with DAG(dag_id=dag_id, schedule=None, start_date=START, catchup=False, tags=["test", "kubernetes"]) as dag:
        DistributedTrainingOperator(
            task_id="train", framework="horovod", environment={"replicas": {"n_workers": 2}},
            command=["python", "/opt/jobs/train.py"], image=IMAGE, backend="kubernetes",
            namespace=namespace_of(dag_id), startup_timeout=30.0, **task_kwargs,
        )
    return dag


# Horovod jobs carry their SSH key pair in a Secret: whatever a failure keeps, the key goes.
horovod_failure = _horovod_dag("k8s_horovod_failure")
horovod_failure_deferrable = _horovod_dag("k8s_horovod_failure_deferrable", deferrable=True)
horovod_failure_kept = _horovod_dag("k8s_horovod_failure_kept", clean_pod_policy="none")

"""DAGs for the quiet-hours tests: jobs whose pods stay silent for many watch periods, with timings scaled down.

``QUIET_TIMINGS`` is what every DAG here gives as ``watch_timings``: watch requests of 1 s with a client read
timeout 0.3 s above it, reconnects within 0.05-0.2 s, and 3 s for the API server to come back. The tests make
the emulator hold watches past ``timeoutSeconds`` without bookmarks, so that each quiet watch ends by the
client's read timeout, as it did against a real API server when the bug was reported.
"""

from __future__ import annotations

import pendulum
from airflow.sdk import DAG

from airflow_distributed.operators import DistributedTrainingOperator
from airflow_distributed.sensors import PytorchJobSensor

IMAGE = "registry.example.com/trainer:1.0"
START = pendulum.datetime(2026, 1, 1, tz="UTC")
#: The job a sensor DAG waits for (the test creates its pods).
JOB = "quiet-job"
QUIET_TIMINGS = {"server_timeout": 1, "read_timeout_margin": 0.3, "reconnect_delay": 0.05,
                 "max_reconnect_delay": 0.2, "reconnect_budget": 3.0}


def namespace_of(dag_id: str) -> str:
    return dag_id.replace("_", "-")


def _training(dag_id: str, backend: str, **task_kwargs) -> DAG:
    with DAG(dag_id=dag_id, schedule=None, start_date=START, catchup=False, tags=["test", "quiet"]) as dag:
        DistributedTrainingOperator(
            task_id="train", framework="pytorch", environment={"pytorch": {"n_workers": 2}},
            command=["python", "/opt/jobs/train.py"], image=IMAGE, backend=backend, namespace=namespace_of(dag_id),
            startup_timeout=60.0, watch_timings=QUIET_TIMINGS, **task_kwargs,
        )
    return dag


def _sensor(dag_id: str, **kwargs) -> DAG:
    with DAG(dag_id=dag_id, schedule=None, start_date=START, catchup=False, tags=["test", "quiet"]) as dag:
        PytorchJobSensor(task_id="wait", job_name=JOB, namespace=namespace_of(dag_id), timeout=120,
                         watch_timings=QUIET_TIMINGS, **kwargs)
    return dag


quiet_k8s = _training("quiet_k8s", "kubernetes")
quiet_k8s_deferrable = _training("quiet_k8s_deferrable", "kubernetes", deferrable=True)
quiet_kubeflow = _training("quiet_kubeflow", "kubeflow")
quiet_kubeflow_deferrable = _training("quiet_kubeflow_deferrable", "kubeflow", deferrable=True)
quiet_trainjob = _training("quiet_trainjob", "trainjob")
quiet_trainjob_deferrable = _training("quiet_trainjob_deferrable", "trainjob", deferrable=True)
quiet_sensor_reschedule = _sensor("quiet_sensor_reschedule", mode="reschedule", poke_interval=0.2)
quiet_sensor_deferrable = _sensor("quiet_sensor_deferrable", deferrable=True, poke_interval=0.2)
# One DAG per failure test: each run gets a namespace of its own.
forbidden = _training("quiet_forbidden", "kubernetes")
forbidden_deferrable = _training("quiet_forbidden_deferrable", "kubernetes", deferrable=True)
unreachable = _training("quiet_unreachable", "kubernetes")
unreachable_deferrable = _training("quiet_unreachable_deferrable", "kubernetes", deferrable=True)
dropped = _training("quiet_dropped", "kubernetes")

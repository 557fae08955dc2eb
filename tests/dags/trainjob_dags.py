"""DAGs for the ``trainjob`` backend's tests; each job runs in a namespace of its own of the API emulator.

The tests play the Kubeflow Trainer controller and JobSet: they create the node pods of the submitted TrainJob,
move them, and write its ``status``. ``namespace_of(dag_id)`` is the namespace a DAG uses.
"""

from __future__ import annotations

from datetime import timedelta

import pendulum
from airflow.sdk import DAG, task

from airflow_distributed.operators import DistributedTrainingOperator
from airflow_distributed.sensors import PytorchJobSensor, TrainJobSensor

IMAGE = "registry.example.com/trainer:1.0"
START = pendulum.datetime(2026, 1, 1, tz="UTC")
ENVIRONMENT = {
    "resources": {"cpu": {"requests": 1, "limits": 2}, "memory": {"requests": 512, "limits": 1024}},
    "node_selector": {"pool": "training"},
    "tolerations": [{"key": "training", "operator": "Exists", "effect": "NoSchedule"}],
    "labels": {"team": "vision"},
    "pytorch": {"n_workers": 2, "n_proc_per_node": 1},
}


def namespace_of(dag_id: str) -> str:
    return dag_id.replace("_", "-")


XGBOOST_ENVIRONMENT = {"resources": {"cpu": {"requests": 1}}, "xgboost": {"n_workers": 2}}
HOROVOD_ENVIRONMENT = {"resources": {"cpu": {"requests": 1}, "gpu": {"requests": 2, "limits": 2}},
                       "replicas": {"n_workers": 2}}
#: The cluster's MPI runtime for Horovod (the test controller plays it; tests/integration/trainjob_controller.py).
HOROVOD_RUNTIME = "horovod-mpi"


def _dag(dag_id: str, *, report: bool = False, **task_kwargs) -> DAG:
    with DAG(dag_id=dag_id, schedule=None, start_date=START, catchup=False, tags=["test", "trainjob"]) as dag:
        train = DistributedTrainingOperator(
            task_id="train",
            command=["python", "/opt/jobs/train.py"],
            args=["--steps", "{{ params.steps }}"],
            params={"steps": 5},
            image=IMAGE,
            backend="trainjob",
            namespace=namespace_of(dag_id),
            **{"framework": "pytorch", "environment": ENVIRONMENT, **task_kwargs,
               "watch_timings": {"server_timeout": 30, **task_kwargs.get("watch_timings", {})}},
        )
        if report:

            @task
            def report_metrics(metrics: dict, model_path: str | None) -> dict:
                return {"loss": metrics["loss"], "model_path": model_path}

            report_metrics(train.output["metrics"], train.output["model_path"])
    return dag


success = _dag("trainjob_success", report=True)
deferrable = _dag("trainjob_deferrable", report=True, deferrable=True)
xgboost = _dag("trainjob_xgboost", report=True, framework="xgboost", environment=XGBOOST_ENVIRONMENT)
horovod = _dag("trainjob_horovod", report=True, framework="horovod", environment=HOROVOD_ENVIRONMENT,
               runtime=HOROVOD_RUNTIME)
horovod_failure = _dag("trainjob_horovod_failure", framework="horovod", environment=HOROVOD_ENVIRONMENT,
                       runtime=HOROVOD_RUNTIME, clean_pod_policy="all")
failure = _dag("trainjob_failure")
# Suspended (as Kueue holds it), then resumed: no pod LISTs meanwhile, however short their pace.
suspended = _dag("trainjob_suspended", execution_timeout=timedelta(seconds=120),
                 watch_timings={"pending_pods_interval": 0.2})
suspended_deferrable = _dag("trainjob_suspended_deferrable", deferrable=True, execution_timeout=timedelta(seconds=120),
                            watch_timings={"pending_pods_interval": 0.2})
long_running = _dag("trainjob_long_running", execution_timeout=timedelta(minutes=5))

#: The TrainJob the sensor DAGs wait for (the test creates it, as another tool would).
EXTERNAL = "external-trainjob"
with DAG(dag_id="trainjob_sensor_deferrable", schedule=None, start_date=START, catchup=False, tags=["test"]):
    TrainJobSensor(task_id="wait", job_name=EXTERNAL, namespace=namespace_of("trainjob_sensor_deferrable"),
                   deferrable=True, poke_interval=0.2, timeout=60)
with DAG(dag_id="trainjob_sensor_failure", schedule=None, start_date=START, catchup=False, tags=["test"]):
    PytorchJobSensor(task_id="wait", job_name=EXTERNAL, namespace=namespace_of("trainjob_sensor_failure"),
                     kind="TrainJob", poke_interval=0.2, timeout=60, retries=2, retry_delay=timedelta(seconds=1))
# The hang watchdog, in the task and in the triggerer: node 0 stops printing while every node runs
# (tests/kube_control_plane).
hung = _dag("trainjob_hung", progress_timeout=timedelta(seconds=6), execution_timeout=timedelta(seconds=60))
hung_deferrable = _dag("trainjob_hung_deferrable", progress_timeout=timedelta(seconds=6),
                       execution_timeout=timedelta(seconds=60), deferrable=True)

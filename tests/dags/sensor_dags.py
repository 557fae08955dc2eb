"""DAGs for the sensors' tests; each DAG works in a namespace of its own of the API emulator.

Nothing here runs a container: the tests play the kubelet (and the Kubeflow controller), creating pods with the
project's labels or Kubeflow objects and moving them. ``namespace_of(dag_id)`` is the namespace a DAG uses.
"""

from __future__ import annotations

from datetime import timedelta

import pendulum
from airflow.sdk import DAG, task

from airflow_distributed.operators import DistributedTrainingOperator
from airflow_distributed.sensors import DistributedJobSensor, PaddleJobSensor, PytorchJobSensor, TensorflowJobSensor

IMAGE = "registry.example.com/trainer:1.0"
START = pendulum.datetime(2026, 1, 1, tz="UTC")


def namespace_of(dag_id: str) -> str:
    return dag_id.replace("_", "-")


#: The job a sensor-only DAG waits for (the test creates its pods or its Kubeflow object).
JOB = "external-job"
FAST = {"poke_interval": 0.2, "timeout": 30}


def _dag(dag_id: str) -> DAG:
    return DAG(dag_id=dag_id, schedule=None, start_date=START, catchup=False, tags=["test", "sensors"])


# A job started by the operator without waiting, then awaited by a sensor that reads its name from XCom.
with _dag("sensor_after_operator"):
    train = DistributedTrainingOperator(
        task_id="train", framework="pytorch", environment={"pytorch": {"n_workers": 2}},
        command=["python", "/opt/jobs/train.py"], image=IMAGE, backend="kubernetes",
        namespace=namespace_of("sensor_after_operator"), wait_for_completion=False,
    )
    wait = PytorchJobSensor(
        task_id="wait",
        job_name="{{ ti.xcom_pull(task_ids='train', key='job_name') }}",
        namespace="{{ ti.xcom_pull(task_ids='train', key='namespace') }}",
        **FAST,
    )

    @task
    def report(metrics: dict, model_path: str | None) -> dict:
        return {"loss": metrics.get("loss"), "model_path": model_path}

    train >> wait
    report(wait.output["metrics"], wait.output["model_path"])


# A job whose master reports no model path: the downstream task runs with None.
with _dag("sensor_metrics_only"):
    wait = PytorchJobSensor(task_id="wait", job_name=JOB, namespace=namespace_of("sensor_metrics_only"), **FAST)
    report(wait.output["metrics"], wait.output["model_path"])

# A job whose master's report is not strict JSON, or not JSON at all: the sensor succeeds all the same.
for _dag_id in ("sensor_bad_report", "sensor_unreadable_report"):
    with _dag(_dag_id):
        wait = PytorchJobSensor(task_id="wait", job_name=JOB, namespace=namespace_of(_dag_id), **FAST)
        report(wait.output["metrics"], wait.output["model_path"])


def _sensor_dag(dag_id: str, sensor_class: type = DistributedJobSensor, **kwargs) -> DAG:
    with _dag(dag_id) as dag:
        sensor_class(task_id="wait", job_name=JOB, namespace=namespace_of(dag_id), **{**FAST, **kwargs})
    return dag


failure = _sensor_dag("sensor_failure", retries=2, retry_delay=timedelta(seconds=0))
soft_fail = _sensor_dag("sensor_soft_fail", soft_fail=True)
timeout = _sensor_dag("sensor_timeout", timeout=1.0)
reschedule = _sensor_dag("sensor_reschedule", mode="reschedule", poke_interval=0.5)
deferrable = _sensor_dag("sensor_deferrable", PytorchJobSensor, deferrable=True, watch_timeout=1)
wrong_framework = _sensor_dag("sensor_wrong_framework", TensorflowJobSensor)
image_pull = _sensor_dag("sensor_image_pull", PytorchJobSensor)
image_pull_recovers = _sensor_dag("sensor_image_pull_recovers", PytorchJobSensor, image_pull_grace=600.0)
image_pull_deferrable = _sensor_dag("sensor_image_pull_deferrable", PytorchJobSensor, deferrable=True,
                                    watch_timeout=1)

tfjob = _sensor_dag("sensor_tfjob", TensorflowJobSensor, kind="kubeflow")
tfjob_failure = _sensor_dag("sensor_tfjob_failure", TensorflowJobSensor, kind="TFJob", retries=2,
                            retry_delay=timedelta(seconds=0))
pytorchjob_deferrable = _sensor_dag("sensor_pytorchjob_deferrable", PytorchJobSensor, kind="kubeflow",
                                    deferrable=True, watch_timeout=1)
paddlejob = _sensor_dag("sensor_paddlejob", PaddleJobSensor, kind="kubeflow")
pytorchjob_image_pull_deferrable = _sensor_dag("sensor_pytorchjob_image_pull_deferrable", PytorchJobSensor,
                                               kind="kubeflow", deferrable=True,
                                               watch_timings={"pending_pods_interval": 0.3})
pytorchjob_image_pull = _sensor_dag("sensor_pytorchjob_image_pull", PytorchJobSensor, kind="kubeflow")
pytorchjob_image_pull_reschedule = _sensor_dag("sensor_pytorchjob_image_pull_reschedule", PytorchJobSensor,
                                               kind="kubeflow", mode="reschedule", poke_interval=0.3)
# A PyTorchJob suspended (held by Kueue), then resumed: no pod LISTs at the pokes meanwhile.
pytorchjob_suspended = _sensor_dag("sensor_pytorchjob_suspended", PytorchJobSensor, kind="kubeflow")

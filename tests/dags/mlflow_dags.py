"""DAGs that log their jobs to MLflow (``mlflow_conn_id``): the connection ``mlflow_test`` is the tests' own
tracking server (``tests/mlflow_server.py``), given as ``AIRFLOW_CONN_MLFLOW_TEST`` by the test that runs them."""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path

import pendulum
from airflow.sdk import DAG

from airflow_distributed.operators import DistributedTrainingOperator
from tests.mlflow_server import CONN_ID

TRAINING_DIR = Path(__file__).resolve().parents[2] / "example_dags" / "training"
SCRIPT = str(TRAINING_DIR / "pytorch_ddp.py")
START = pendulum.datetime(2026, 1, 1, tz="UTC")
MODEL_NAME = "ddp-regression"
STEPS, LOG_EVERY = 30, 10
TENSORBOARD = "http://127.0.0.1:6006/#scalars&regexInput={job_name}"

with DAG(dag_id="test_mlflow_ddp", schedule=None, start_date=START, catchup=False, tags=["test"],
         params={"steps": STEPS, "lr": 0.05}) as ddp:
    DistributedTrainingOperator(
        task_id="train",
        framework="pytorch",
        environment={
            "resources": {"cpu": {"requests": 1, "limits": 1}},
            "pytorch": {"n_workers": 2, "default_worker": {"resources": {"cpu": {"requests": 1, "limits": 1}}}},
        },
        command=["python", SCRIPT, "--steps", "{{ params.steps }}", "--lr", "{{ params.lr }}",
                 "--log-every", str(LOG_EVERY)],
        mlflow_conn_id=CONN_ID,
        mlflow_params=["steps", "lr"],
        register_model=MODEL_NAME,
        model_asset="file:///models/test_mlflow_ddp/train",
        tensorboard_url=TENSORBOARD,
        stop_grace_period=3.0,
    )

# A worker dies at step 45 of the first try only; the retry resumes from the checkpoint of step 40, in the same run.
RESUME_STEPS, CRASH_AT, EVERY = 60, 45, 10
with DAG(dag_id="test_mlflow_resume", schedule=None, start_date=START, catchup=False, tags=["test"]) as resume:
    DistributedTrainingOperator(
        task_id="train",
        framework="pytorch",
        environment={"pytorch": {"n_workers": 2}},
        command=["python", SCRIPT, "--steps", str(RESUME_STEPS), "--checkpoint-every", str(EVERY),
                 "--log-every", str(EVERY), "--crash-at-step", str(CRASH_AT), "--crash-rank", "2",
                 "--crash-on-try", "1"],
        retries=1,
        retry_delay=timedelta(seconds=0),
        mlflow_conn_id=CONN_ID,
        stop_grace_period=3.0,
    )

# A job that waits for the test's word (a file) before it reports and ends: the test stops the tracking server while
# it waits, or points the connection at a port nobody serves.
WAITER = """
import os, sys, time
from airflow_distributed import tracking
for step in range(1, 4):
    tracking.log_metrics(step=step, loss=1.0 / step)
deadline = time.monotonic() + 120
while not os.path.exists(sys.argv[1]) and time.monotonic() < deadline:
    time.sleep(0.1)
tracking.log_metrics(done=1)
"""
with DAG(dag_id="test_mlflow_outage", schedule=None, start_date=START, catchup=False, tags=["test"]) as outage:
    DistributedTrainingOperator(
        task_id="train",
        framework="pytorch",
        environment={"pytorch": {"n_workers": 1}},
        command=["python", "-c", WAITER, "{{ dag_run.conf['go_file'] }}"],
        mlflow_conn_id=CONN_ID,
        stop_grace_period=3.0,
    )

# A Kubernetes job waited for in the triggerer (the tests' API emulator, the test playing the kubelet): the run opened
# before the deferral is the one the resumed task closes. Its model is on storage (s3://): registered from its URL.
DEFERRED_NAMESPACE = "test-mlflow-deferred"
with DAG(dag_id="test_mlflow_deferred", schedule=None, start_date=START, catchup=False, tags=["test"]) as deferred:
    DistributedTrainingOperator(
        task_id="train",
        framework="pytorch",
        environment={"pytorch": {"n_workers": 2}},
        command=["python", "/opt/jobs/train.py"],
        image="registry.example.com/trainer:1.0",
        backend="kubernetes",
        namespace=DEFERRED_NAMESPACE,
        deferrable=True,
        startup_timeout=30.0,
        mlflow_conn_id=CONN_ID,
        register_model=MODEL_NAME + "-deferred",
    )

# A job killed by Airflow (SIGTERM to the task) whose replicas hold on after SIGTERM: the task's stop waits out their
# grace (``KILLED_GRACE`` s), longer than the supervisor's 5 s before SIGKILL, and the run must not stay RUNNING.
KILLED_GRACE = 20.0
STUBBORN = """
import signal, time
from airflow_distributed import tracking
signal.signal(signal.SIGTERM, lambda *_: print("SIGTERM: holding on", flush=True))
tracking.log_metrics(step=1, loss=1.0)
while True:
    time.sleep(0.2)
"""
with DAG(dag_id="test_mlflow_killed", schedule=None, start_date=START, catchup=False, tags=["test"]) as killed:
    DistributedTrainingOperator(
        task_id="train",
        framework="pytorch",
        environment={"pytorch": {"n_workers": 1}},
        command=["python", "-c", STUBBORN],
        mlflow_conn_id=CONN_ID,
        stop_grace_period=KILLED_GRACE,
    )

# The same, waited for in the task (not deferred): both ways on the real control plane
# (``tests/kube_control_plane/test_mlflow.py``).
with DAG(dag_id="test_mlflow_kubernetes", schedule=None, start_date=START, catchup=False, tags=["test"],
         params={"steps": 40}) as kubernetes_sync:
    DistributedTrainingOperator(
        task_id="train",
        framework="pytorch",
        environment={"pytorch": {"n_workers": 2, "default_worker": {"resources": {"cpu": {"requests": 1}}}}},
        command=["python", "/opt/jobs/train.py", "--steps", "{{ params.steps }}"],
        image="registry.example.com/trainer:1.0",
        backend="kubernetes",
        namespace="test-mlflow-kubernetes",
        startup_timeout=30.0,
        mlflow_conn_id=CONN_ID,
        mlflow_params=["steps"],
        register_model=MODEL_NAME + "-kubernetes",
    )

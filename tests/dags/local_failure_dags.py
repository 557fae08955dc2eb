"""DAGs for the local backend's failure paths: a replica crashing mid-training, a timeout, a long job to kill."""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path

import pendulum
from airflow.sdk import DAG

from airflow_distributed.operators import DistributedTrainingOperator

TRAINING_DIR = Path(__file__).resolve().parents[2] / "example_dags" / "training"
SCRIPT = str(TRAINING_DIR / "pytorch_ddp.py")
START = pendulum.datetime(2026, 1, 1, tz="UTC")


def _dag(dag_id: str, args: list[str], **task_kwargs) -> DAG:
    with DAG(dag_id=dag_id, schedule=None, start_date=START, catchup=False, tags=["test"]) as dag:
        DistributedTrainingOperator(
            task_id="train",
            framework="pytorch",
            environment={"pytorch": {"n_workers": 2}},
            command=["python", SCRIPT, *args],
            stop_grace_period=3.0,
            **task_kwargs,
        )
    return dag


slow = ["--steps", "100000", "--sleep-per-step", "0.05"]
worker_crash = _dag("test_worker_crash", [*slow, "--crash-at-step", "5", "--crash-rank", "2"])
master_crash = _dag("test_master_crash", [*slow, "--crash-at-step", "5", "--crash-rank", "0"])
timeout = _dag("test_timeout", slow, execution_timeout=timedelta(seconds=12))
long_running = _dag("test_long_running", slow)

# Paddle's parameter-server mode with stand-in replicas, so that the backend's part runs without Paddle: pservers
# listen on POD_IP:PADDLE_PORT and never exit, as Paddle's may not; every trainer connects to every pserver of
# PADDLE_PSERVERS_IP_PORT_LIST, and the master reports what it reached.
PSERVER_STAND_IN = """
import json, os, socket, time
from airflow_distributed import tracking
env = os.environ
if env["TRAINING_ROLE"] == "PSERVER":
    server = socket.create_server((env["POD_IP"], int(env["PADDLE_PORT"])))
    while True:
        server.accept()[0].close()
reached = []
for endpoint in env["PADDLE_PSERVERS_IP_PORT_LIST"].split(","):
    host, port = endpoint.rsplit(":", 1)
    for _ in range(300):
        try:
            socket.create_connection((host, int(port)), timeout=1).close()
            reached.append(endpoint)
            break
        except OSError:
            time.sleep(0.1)
tracking.log_metrics(trainer_id=int(env["PADDLE_TRAINER_ID"]), trainers=int(env["PADDLE_TRAINERS_NUM"]),
                     pservers_reached=len(reached))
"""
with DAG(dag_id="test_paddle_ps_stand_in", schedule=None, start_date=START, catchup=False, tags=["test"]) as ps_dag:
    DistributedTrainingOperator(
        task_id="train",
        framework="paddle",
        environment={"paddle": {"n_ps": 2, "n_workers": 1}},
        command=["python", "-c", PSERVER_STAND_IN],
        stop_grace_period=3.0,
    )

# A command whose arguments hold a value from the run's conf (a token, say), which the task log must not show.
SECRET_ARGUMENT = """
import os, sys
from airflow_distributed import tracking
tracking.log_metrics(token_length=len(sys.argv[2]), work_mode=oct(os.stat(os.getcwd()).st_mode & 0o777))
print("work folder", os.getcwd(), flush=True)
"""
secret_argument = DAG(dag_id="test_secret_argument", schedule=None, start_date=START, catchup=False, tags=["test"])
with secret_argument:
    DistributedTrainingOperator(
        task_id="train",
        framework="pytorch",
        environment={"pytorch": {"n_workers": 1}},
        command=["python", "-c", SECRET_ARGUMENT, "--token", "{{ dag_run.conf['token'] }}"],
        stop_grace_period=3.0,
    )

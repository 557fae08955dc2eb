"""DAGs of the tests on the real node (``tests/kube_node``): the example PyTorch DDP script trained by a master and
two workers in real pods, sync and deferrable. The images are the node's (``scripts/build-kube-node-images.sh``),
named by the fixture through the environment; the namespace is the DAG id's."""

from __future__ import annotations

import os
from datetime import timedelta

import pendulum
from airflow.sdk import DAG

from airflow_distributed.operators import DistributedTrainingOperator

START = pendulum.datetime(2026, 1, 1, tz="UTC")
#: Where the trainer image holds the example training scripts.
TRAINING_DIR = "/opt/airflow-distributed/training"


def trainer_image() -> str:
    # Parsed outside a node session too (every DAG file is): a placeholder then, which no test runs.
    return os.environ.get("KUBE_NODE_TRAINER_IMAGE", "127.0.0.1:5000/airflow-distributed/trainer:unbuilt")


for dag_id, deferrable in (("node_ddp", False), ("node_ddp_deferrable", True)):
    with DAG(dag_id=dag_id, schedule=None, start_date=START, catchup=False, tags=["test", "kubernetes"]):
        DistributedTrainingOperator(
            task_id="train", framework="pytorch", image=trainer_image(), backend="kubernetes",
            command=["python3", f"{TRAINING_DIR}/pytorch_ddp.py"], args=["--steps", "20"],
            environment={"resources": {"cpu": {"requests": 0.1}, "memory": {"requests": 64, "limits": 1024}},
                         "pytorch": {"n_workers": 2}},
            namespace=dag_id.replace("_", "-"), deferrable=deferrable, startup_timeout=180, logging_interval=1,
            # Every replica's lines in the task log (followed by the synchronous wait; deferred, the master's only).
            log_replicas="all")


# Failures, each with clean_pod_policy="all" so that a failed job leaves nothing either. The master (rank 0) listens
# on MASTER_PORT, as torch's store would (the workers start only once it accepts), and waits to be deleted; the
# replica that fails is a worker, whose command runs as its container's PID 1 (the master's runs under the output
# relay): the cgroup's OOM kill must hit PID 1 for the runtime to report OOMKilled.
_WAIT_OR = ("import os, socket, sys, time\n"
            "if os.environ['RANK'] == '0':\n"
            "    server = socket.create_server(('', int(os.environ['MASTER_PORT'])))\n"
            "    time.sleep(600)\n")
FAILURES = {
    # 256 MiB written (bytes pages touched, not lazily zeroed) in a container limited to 64 MiB.
    "node_worker_oom": (_WAIT_OR + "blob = b'x' * (256 << 20)\n", {"memory": {"requests": 32, "limits": 64}}),
    "node_worker_exit": (_WAIT_OR + "print('worker gives up', flush=True)\nsys.exit(1)\n", {}),
}
for dag_id, (code, worker_resources) in FAILURES.items():
    with DAG(dag_id=dag_id, schedule=None, start_date=START, catchup=False, tags=["test", "kubernetes"]):
        DistributedTrainingOperator(
            task_id="train", framework="pytorch", image=trainer_image(), backend="kubernetes",
            command=["python3", "-c", code], clean_pod_policy="all", namespace=dag_id.replace("_", "-"),
            environment={"resources": {"cpu": {"requests": 0.1}, "memory": {"requests": 32, "limits": 256}},
                         "pytorch": {"n_workers": 1, "default_worker": {"resources": worker_resources}}},
            startup_timeout=180)

# An image the registry lacks: the first failed pull fails the task.
with DAG(dag_id="node_image_missing", schedule=None, start_date=START, catchup=False, tags=["test", "kubernetes"]):
    DistributedTrainingOperator(
        task_id="train", framework="pytorch", image="127.0.0.1:5000/airflow-distributed/absent:0",
        backend="kubernetes", command=["python3", "-c", "pass"], clean_pod_policy="all",
        namespace="node-image-missing", environment={"pytorch": {"n_workers": 1}}, startup_timeout=180)

# A job outliving its task's execution_timeout: every replica waits (the master listening, as torch's store would),
# so only the task's clean-up ends them, with the pods' real grace periods.
with DAG(dag_id="node_timed_out", schedule=None, start_date=START, catchup=False, tags=["test", "kubernetes"]):
    DistributedTrainingOperator(
        task_id="train", framework="pytorch", image=trainer_image(), backend="kubernetes",
        command=["python3", "-c", _WAIT_OR + "time.sleep(600)\n"], namespace="node-timed-out",
        environment={"resources": {"cpu": {"requests": 0.1}, "memory": {"requests": 32, "limits": 256}},
                     "pytorch": {"n_workers": 1}},
        startup_timeout=180, execution_timeout=timedelta(seconds=40))

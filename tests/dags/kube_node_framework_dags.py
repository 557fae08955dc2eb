"""DAGs of the slow tests on the real node (``tests/kube_node/test_frameworks.py``): the example training scripts of
TensorFlow, JAX and XGBoost, each trained by three replicas in real pods of the kubernetes backend, from an image of
that framework's CPU wheels (``scripts/build-kube-node-images.sh --with <framework>``), named by the test through the
environment; the namespace is the DAG id's.

MXNet's workers hand the scheduler their results through the model directory, which must be one for every replica
(as on any cluster): here a ``hostPath`` folder of the one node, made per test (``KUBE_NODE_MODEL_DIR``)."""

from __future__ import annotations

import os

import pendulum
from airflow.sdk import DAG

from airflow_distributed.operators import DistributedTrainingOperator

START = pendulum.datetime(2026, 1, 1, tz="UTC")
#: Where the trainer images hold the example training scripts. Not imported from kube_node_dags.py: a DAG file that
#: imports another makes the DagBag find that one's DAGs in both (AirflowDagDuplicatedIdException, by file order).
TRAINING_DIR = "/opt/airflow-distributed/training"
#: framework -> (its example script, its arguments, its replicas, and each replica's memory limit in MiB):
#: TensorFlow's runtime alone takes about 400 MiB a replica.
FRAMEWORKS = {
    "tensorflow": ("tensorflow_multiworker.py", ["--steps", "10"], {"n_workers": 2}, 1536),
    "jax": ("jax_data_parallel.py", ["--steps", "20"], {"n_workers": 2}, 768),
    "xgboost": ("xgboost_dist.py", ["--steps", "8"], {"n_workers": 2}, 512),
    "mxnet": ("mxnet_dist_sync.py", ["--steps", "20"], {"n_workers": 2, "n_ps": 1}, 768),
    "paddle": ("paddle_collective.py", ["--steps", "20"], {"n_workers": 2}, 1024),
}


def image_variable(framework: str) -> str:
    return f"KUBE_NODE_{framework.upper()}_IMAGE"


def shared_model_volume() -> dict:
    return {"hostPath": {"path": os.environ.get("KUBE_NODE_MODEL_DIR", "/nonexistent"), "type": "Directory"}}


for framework, (script, args, replicas, memory) in FRAMEWORKS.items():
    dag_id = f"node_{framework}"
    with DAG(dag_id=dag_id, schedule=None, start_date=START, catchup=False, tags=["test", "kubernetes"]):
        DistributedTrainingOperator(
            task_id="train", framework=framework, backend="kubernetes",
            # Parsed outside a node session too (every DAG file is): a placeholder then, which no test runs.
            image=os.environ.get(image_variable(framework), f"127.0.0.1:5000/airflow-distributed/{framework}:unbuilt"),
            command=["python3", f"{TRAINING_DIR}/{script}"], args=args,
            environment={"resources": {"cpu": {"requests": 0.1}, "memory": {"requests": 64, "limits": memory}},
                         framework: replicas},
            env={"TF_CPP_MIN_LOG_LEVEL": "2"} if framework == "tensorflow" else None,
            model_volume=shared_model_volume() if framework == "mxnet" else None,
            namespace=dag_id.replace("_", "-"), startup_timeout=300, logging_interval=1, log_replicas="all")

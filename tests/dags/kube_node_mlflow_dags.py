"""A DAG of the real node's MLflow test (``tests/kube_node/test_mlflow.py``): the example PyTorch DDP script trained
by a master and two workers in real pods, its job logged to the tests' tracking server (``mlflow_conn_id``), asking
for its model to be registered (which a path inside a pod cannot be). The image is the node's, named by the fixture
through the environment."""

from __future__ import annotations

import pendulum
from airflow.sdk import DAG

from airflow_distributed.operators import DistributedTrainingOperator
from tests.kube_node.images import TRAINING_DIR, trainer_image
from tests.mlflow_server import CONN_ID

START = pendulum.datetime(2026, 1, 1, tz="UTC")
#: The registered model the job's versions go to.
MODEL = "node-ddp"
STEPS = 20

with DAG(dag_id="node_mlflow", schedule=None, start_date=START, catchup=False, tags=["test", "kubernetes"],
         params={"steps": STEPS}):
    DistributedTrainingOperator(
        task_id="train", framework="pytorch", image=trainer_image(), backend="kubernetes",
        command=["python3", f"{TRAINING_DIR}/pytorch_ddp.py"],
        args=["--steps", "{{ params.steps }}", "--log-every", "2"],
        environment={"resources": {"cpu": {"requests": 0.1}, "memory": {"requests": 64, "limits": 1024}},
                     "pytorch": {"n_workers": 2}},
        namespace="node-mlflow", startup_timeout=180, mlflow_conn_id=CONN_ID, mlflow_params=["steps"],
        register_model=MODEL)

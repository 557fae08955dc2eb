"""DAGs of the slow tests on the real node (``tests/kube_node/test_frameworks.py``): the example training scripts of
TensorFlow, JAX, XGBoost, MXNet and Paddle, each trained by three or four replicas in real pods of the kubernetes
backend, from an image of that framework's CPU wheels (``scripts/build-kube-node-images.sh --with <framework>``),
named by the test through the environment; the namespace is the DAG id's.

MXNet's workers hand the scheduler their results through the model directory, which must be one for every replica
(as on any cluster): here a ``hostPath`` folder of the one node, made per test (``KUBE_NODE_MODEL_DIR``)."""

from __future__ import annotations

import pendulum
from airflow.sdk import DAG

from airflow_distributed.operators import DistributedTrainingOperator
from tests.kube_node.images import TRAINING_DIR, shared_model_volume, trainer_image

START = pendulum.datetime(2026, 1, 1, tz="UTC")
#: framework -> (its example script, its arguments, its replicas, and each replica's memory limit in MiB):
#: TensorFlow's runtime alone takes about 400 MiB a replica.
FRAMEWORKS = {
    "tensorflow": ("tensorflow_multiworker.py", ["--steps", "10"], {"n_workers": 2}, 1536),
    "jax": ("jax_data_parallel.py", ["--steps", "20"], {"n_workers": 2}, 768),
    "xgboost": ("xgboost_dist.py", ["--steps", "8"], {"n_workers": 2}, 512),
    "mxnet": ("mxnet_dist_sync.py", ["--steps", "20"], {"n_workers": 2, "n_ps": 1}, 768),
    "paddle": ("paddle_collective.py", ["--steps", "20"], {"n_workers": 2}, 1024),
    # Paddle's parameter-server mode (two pservers, two trainers), from the Paddle 2.6 image (``paddle_ps``).
    "paddle_ps": ("paddle_ps.py", ["--steps", "20"], {"n_ps": 2, "n_workers": 1}, 1024),
}
#: The DAGs whose replicas share their model directory: MXNet's workers hand their results to the scheduler, Paddle's
#: trainers compare their parameters' checksums through it.
SHARED_MODEL_DIR = ("mxnet", "paddle_ps")


for image, (script, args, replicas, memory) in FRAMEWORKS.items():
    dag_id = f"node_{image}"
    framework = image.split("_")[0]
    with DAG(dag_id=dag_id, schedule=None, start_date=START, catchup=False, tags=["test", "kubernetes"]):
        DistributedTrainingOperator(
            task_id="train", framework=framework, backend="kubernetes",
            image=trainer_image(image),
            command=["python3", f"{TRAINING_DIR}/{script}"], args=args,
            environment={"resources": {"cpu": {"requests": 0.1}, "memory": {"requests": 64, "limits": memory}},
                         framework: replicas},
            env={"TF_CPP_MIN_LOG_LEVEL": "2"} if framework == "tensorflow" else {"GLOG_minloglevel": "2"}
            if image == "paddle_ps" else None,
            model_volume=shared_model_volume() if image in SHARED_MODEL_DIR else None,
            namespace=dag_id.replace("_", "-"), startup_timeout=300, logging_interval=1, log_replicas="all")

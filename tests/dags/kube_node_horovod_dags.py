"""DAGs of the slow Horovod test on the real node (``tests/kube_node/test_horovod.py``): the example Horovod script
trained by a launcher and two workers in real pods of the kubernetes backend, sync and deferrable, the launcher's
``horovodrun`` starting the workers' ranks over SSH to their sshd. The image
(``scripts/build-kube-node-images.sh --with horovod``) is named by the test through the environment; the namespace is
the DAG id's."""

from __future__ import annotations

import pendulum
from airflow.sdk import DAG

from airflow_distributed.operators import DistributedTrainingOperator
from tests.kube_node.images import TRAINING_DIR, trainer_image

START = pendulum.datetime(2026, 1, 1, tz="UTC")

for dag_id, deferrable in (("node_horovod", False), ("node_horovod_deferrable", True)):
    with DAG(dag_id=dag_id, schedule=None, start_date=START, catchup=False, tags=["test", "kubernetes"]):
        DistributedTrainingOperator(
            task_id="train", framework="horovod", backend="kubernetes",
            image=trainer_image("horovod"),
            command=["python3", f"{TRAINING_DIR}/horovod_torch.py"], args=["--steps", "20"],
            environment={"resources": {"cpu": {"requests": 0.1}, "memory": {"requests": 64, "limits": 1024}},
                         "replicas": {"n_workers": 2}},
            namespace=dag_id.replace("_", "-"), deferrable=deferrable, startup_timeout=300, logging_interval=1,
            log_replicas="all")

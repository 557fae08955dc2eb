"""DAGs of the real node's capacity tests (``tests/kube_node/test_capacity.py``): a replica asking for more CPU or
memory than the node has (the node's real capacity, as its kubelet reports it) is never scheduled, and the task fails
naming it and what it asked. The namespace is the DAG id's."""

from __future__ import annotations

import pendulum
from airflow.sdk import DAG

from airflow_distributed.operators import DistributedTrainingOperator
from tests.dags.kube_node_dags import trainer_image

START = pendulum.datetime(2026, 1, 1, tz="UTC")
#: Far more than this machine has (a few cores, tens of GiB), and not so much that the request is malformed.
TOO_MANY_CPUS = 512
TOO_MUCH_MEMORY_MIB = 4 << 20  # 4 TiB

# (DAG id, the worker's resources, the limits): with queue_timeout the wait for capacity fails as queued; without it,
# startup_timeout covers that wait.
CAPACITY = {
    "node_too_many_cpus": ({"cpu": {"requests": TOO_MANY_CPUS}}, {"queue_timeout": 8}),
    "node_too_much_memory": ({"memory": {"requests": TOO_MUCH_MEMORY_MIB}}, {"startup_timeout": 10}),
}
for dag_id, (worker_resources, limits) in CAPACITY.items():
    with DAG(dag_id=dag_id, schedule=None, start_date=START, catchup=False, tags=["test", "kubernetes"]):
        DistributedTrainingOperator(
            task_id="train", framework="pytorch", image=trainer_image(), backend="kubernetes",
            command=["python3", "-c", "import time; time.sleep(600)"], clean_pod_policy="all",
            namespace=dag_id.replace("_", "-"),
            environment={"resources": {"cpu": {"requests": 0.1}, "memory": {"requests": 32, "limits": 256}},
                         "pytorch": {"n_workers": 1, "default_worker": {"resources": worker_resources}}},
            **limits)

"""DAGs of the real node's capacity and fault tests (``tests/kube_node/test_capacity.py``,
``tests/kube_node/test_elastic_kill.py``): a replica asking for more CPU or memory than the node has (its real
capacity, as its kubelet reports it) is never scheduled, and the task fails naming it and what it asked; an elastic
PyTorch job whose worker's container the test kills mid-training. The namespace is the DAG id's.
"""

from __future__ import annotations

import pendulum
from airflow.sdk import DAG

from airflow_distributed.operators import DistributedTrainingOperator
from tests.kube_node.images import TRAINING_DIR, shared_model_volume, trainer_image

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
            # Ends at the clean-up's SIGTERM: a python3 as PID 1 has no default action for it and would wait out
            # its pod's whole grace period (30 s).
            command=["python3", "-c", "import signal, sys, time\n"
                     "signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))\ntime.sleep(600)"],
            clean_pod_policy="all",
            namespace=dag_id.replace("_", "-"),
            environment={"resources": {"cpu": {"requests": 0.1}, "memory": {"requests": 32, "limits": 256}},
                         "pytorch": {"n_workers": 1, "default_worker": {"resources": worker_resources}}},
            **limits)

# A checkpoint every 10 steps on a host folder mounted as the model volume (storage that outlives the pods), named
# by the test through KUBE_NODE_MODEL_DIR; the master and one worker under torch's elastic agent.
STEPS, EVERY = 150, 10

with DAG(dag_id="node_elastic_kill", schedule=None, start_date=START, catchup=False, tags=["test", "kubernetes"]):
    DistributedTrainingOperator(
        task_id="train", framework="pytorch", image=trainer_image(), backend="kubernetes",
        command=["python3", f"{TRAINING_DIR}/pytorch_ddp.py"],
        args=["--steps", str(STEPS), "--checkpoint-every", str(EVERY), "--sleep-per-step", "0.05", "--timeout", "60"],
        environment={"resources": {"cpu": {"requests": 0.1}, "memory": {"requests": 64, "limits": 1024}},
                     "pytorch": {"n_workers": 1, "elastic": {"max_restarts": 1, "rdzv_timeout": 60}}},
        model_volume=shared_model_volume(),
        keep_checkpoints=True, namespace="node-elastic-kill", startup_timeout=180, logging_interval=1,
        log_replicas="all")

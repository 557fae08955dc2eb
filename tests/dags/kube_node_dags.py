"""DAGs of the tests on the real node (``tests/kube_node``): the example PyTorch DDP script trained by a master and
two workers in real pods, sync and deferrable. The images are the node's (``scripts/build-kube-node-images.sh``),
named by the fixture through the environment; the namespace is the DAG id's."""

from __future__ import annotations

from datetime import timedelta

import pendulum
from airflow.sdk import DAG, task

from airflow_distributed.operators import DistributedTrainingOperator
from tests.hang_scripts import GLOO_HANG
from tests.kube_node.images import TRAINING_DIR, trainer_image
from tests.process_variables import PRELUDE

START = pendulum.datetime(2026, 1, 1, tz="UTC")
#: Each replica says what its /dev/shm is (file system type, size) before it trains: the pods' memory-backed
#: emptyDir (shm_size="auto": half each replica's 1024 MiB memory limit), not the runtime's 64 MiB.
SHM_REPORT = ('echo "dev-shm: $(stat -f -c %T /dev/shm) $(df -k --output=size /dev/shm | tail -n 1 | tr -d " ")KiB"; '
              'exec python3 "$0" "$@"')
for dag_id, deferrable in (("node_ddp", False), ("node_ddp_deferrable", True)):
    with DAG(dag_id=dag_id, schedule=None, start_date=START, catchup=False, tags=["test", "kubernetes"]):
        DistributedTrainingOperator(
            task_id="train", framework="pytorch", image=trainer_image(), backend="kubernetes",
            command=["sh", "-c", SHM_REPORT, f"{TRAINING_DIR}/pytorch_ddp.py"], args=["--steps", "20"],
            environment={"resources": {"cpu": {"requests": 0.1}, "memory": {"requests": 64, "limits": 1024}},
                         "pytorch": {"n_workers": 2, "default_worker": {"resources": {
                             "cpu": {"requests": 0.1}, "memory": {"requests": 64, "limits": 1024}}}}},
            namespace=dag_id.replace("_", "-"), deferrable=deferrable, startup_timeout=180, logging_interval=1,
            # Every replica's lines in the task log (followed by the synchronous wait; deferred, the master's only).
            log_replicas="all")


# The same training by 2 replicas of 3 processes each (environment.pytorch.n_proc_per_node): torch's launcher in each
# pod starts the processes, each printing its rank variables first (tests/process_variables.py).
with DAG(dag_id="node_nproc_ddp", schedule=None, start_date=START, catchup=False, tags=["test", "kubernetes"]):
    DistributedTrainingOperator(
        task_id="train", framework="pytorch", image=trainer_image(), backend="kubernetes",
        command=["python3", "-c", PRELUDE, f"{TRAINING_DIR}/pytorch_ddp.py"], args=["--steps", "5"],
        environment={"resources": {"cpu": {"requests": 0.1}, "memory": {"requests": 64, "limits": 2048}},
                     "pytorch": {"n_workers": 1, "n_proc_per_node": 3}},
        namespace="node-nproc-ddp", startup_timeout=180, logging_interval=1, log_replicas="all")


# The same training as a PyTorchJob (its pods made by the stand-in operator, tests/kube_node/training_operator.py)
# and as a TrainJob (torch-distributed runtime: its node pods made by the stand-in for Trainer and JobSet), run by
# the real kubelet.
for backend, kind in (("kubeflow", "pytorchjob"), ("trainjob", "trainjob")):
    with DAG(dag_id=f"node_{kind}", schedule=None, start_date=START, catchup=False, tags=["test", backend]):
        DistributedTrainingOperator(
            task_id="train", framework="pytorch", image=trainer_image(), backend=backend,
            command=["python3", f"{TRAINING_DIR}/pytorch_ddp.py"], args=["--steps", "20"],
            environment={"resources": {"cpu": {"requests": 0.1}, "memory": {"requests": 64, "limits": 1024}},
                         "pytorch": {"n_workers": 2}},
            namespace=f"node-{kind}", logging_interval=1)
    # 2 replicas x 3 processes: the operator's pods each run torch's launcher, from the variables it sets.
    with DAG(dag_id=f"node_{kind}_nproc", schedule=None, start_date=START, catchup=False, tags=["test", backend]):
        DistributedTrainingOperator(
            task_id="train", framework="pytorch", image=trainer_image(), backend=backend,
            command=["python3", "-c", PRELUDE, f"{TRAINING_DIR}/pytorch_ddp.py"], args=["--steps", "5"],
            environment={"resources": {"cpu": {"requests": 0.1}, "memory": {"requests": 64, "limits": 2048}},
                         "pytorch": {"n_workers": 1, "n_proc_per_node": 3}},
            namespace=f"node-{kind}-nproc", logging_interval=1)

# A PyTorchJob's master (alone) reporting 400 steps: its output document is far longer than the 4 KiB a
# termination message holds, the only way out on this backend (no XCom sidecar); the relay cuts it to its brief.
with DAG(dag_id="node_pytorchjob_long_output", schedule=None, start_date=START, catchup=False,
         tags=["test", "kubeflow"]):
    DistributedTrainingOperator(
        task_id="train", framework="pytorch", image=trainer_image(), backend="kubeflow",
        command=["python3", "-c", "from airflow_distributed import tracking\n"
                                  "for step in range(1, 401):\n"
                                  "    tracking.log_metrics(step=step, loss=1 / step)\n"
                                  "tracking.log_model('/airflow-distributed/model/model.pt')\n"],
        environment={"resources": {"cpu": {"requests": 0.1}, "memory": {"requests": 32, "limits": 256}}},
        namespace="node-pytorchjob-long-output")

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

# The master (under the output relay, its command the relay's child, not its container's PID 1) writes 256 MiB under
# its 64 MiB limit once it listens; its worker waits. The cgroup kills the relay's child: the master fails OOMKilled.
with DAG(dag_id="node_master_oom", schedule=None, start_date=START, catchup=False, tags=["test", "kubernetes"]):
    DistributedTrainingOperator(
        task_id="train", framework="pytorch", image=trainer_image(), backend="kubernetes",
        command=["python3", "-c", "import os, socket, time\n"
                                  "if os.environ['RANK'] == '0':\n"
                                  "    server = socket.create_server(('', int(os.environ['MASTER_PORT'])))\n"
                                  "    time.sleep(2)\n"
                                  "    blob = b'x' * (256 << 20)\n"
                                  "time.sleep(600)\n"],
        clean_pod_policy="all", namespace="node-master-oom",
        environment={"resources": {"cpu": {"requests": 0.1}, "memory": {"requests": 32, "limits": 64}},
                     "pytorch": {"n_workers": 1}},
        startup_timeout=180)

# A master that never listens: its worker's readiness step waits for it until startup_timeout fails the job (not
# until the step's own limit, minutes later); execution_timeout ends the task if startup_timeout does not.
with DAG(dag_id="node_readiness_stuck", schedule=None, start_date=START, catchup=False, tags=["test", "kubernetes"]):
    DistributedTrainingOperator(
        task_id="train", framework="pytorch", image=trainer_image(), backend="kubernetes",
        command=["python3", "-c", "import time; time.sleep(600)"], clean_pod_policy="all",
        namespace="node-readiness-stuck",
        environment={"resources": {"cpu": {"requests": 0.1}, "memory": {"requests": 32, "limits": 256}},
                     "pytorch": {"n_workers": 1}},
        startup_timeout=20, execution_timeout=timedelta(seconds=150))

# The hang watchdog on real processes: the master and worker 0 block in a gloo all-reduce that worker 1 never joins;
# the task asks each replica for its Python stacks over pods/exec (a shell's kill in the container, the processes
# that imported tracking print them) and quotes them.
with DAG(dag_id="node_hung", schedule=None, start_date=START, catchup=False, tags=["test", "kubernetes"]):
    DistributedTrainingOperator(
        task_id="train", framework="pytorch", image=trainer_image(), backend="kubernetes",
        command=["python3", "-c", GLOO_HANG], namespace="node-hung",
        environment={"resources": {"cpu": {"requests": 0.1}, "memory": {"requests": 64, "limits": 1024}},
                     "pytorch": {"n_workers": 2}},
        startup_timeout=180, progress_timeout=timedelta(seconds=20))

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

# @task.distributed in real pods: its function from the job's ConfigMap, its arguments (one of them the run's token,
# a secret) from the job's Secret, run by the image's python3; the ranks meet over gloo and sum their ranks, each
# adding the token's length, and the master's value is the task's XCom, read by the task after it.
with DAG(dag_id="node_task_distributed", schedule=None, start_date=START, catchup=False, tags=["test", "kubernetes"]):

    @task.distributed(framework="pytorch", image=trainer_image(), backend="kubernetes",
                      namespace="node-task-distributed", startup_timeout=180,
                      environment={"resources": {"cpu": {"requests": 0.1}, "memory": {"requests": 64, "limits": 1024}},
                                   "pytorch": {"n_workers": 1}})
    def reduce_ranks(token: str, scale: int) -> dict:
        import sys

        import torch
        import torch.distributed as dist

        dist.init_process_group("gloo")
        total = torch.tensor([float(dist.get_rank() + len(token))])
        dist.all_reduce(total)
        world_size = dist.get_world_size()
        dist.destroy_process_group()
        return {"total": int(total.item()) * scale, "world_size": world_size, "python": sys.executable,
                "script": sys.argv[0], "arguments": sys.argv[1]}

    @task
    def total_of(value: dict) -> int:
        return value["total"]

    total_of(reduce_ranks("{{ dag_run.conf['token'] }}", 10))

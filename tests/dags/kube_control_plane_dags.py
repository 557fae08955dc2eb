"""DAGs of the tests on the real control plane (``tests/kube_control_plane``) that the emulator's DAG files lack: a
job that outlives its task's ``execution_timeout``, a hung and a slow master, a job waiting for capacity, a replica
evicted or deleted mid-training under retries, a script failing its last try, sync and deferrable, a deferred job
whose master's lines the trigger relays every half second, replicas of several processes and GPUs, and a
PyTorchJob whose task loses its rights mid-wait.
The namespace is the DAG id's."""

from __future__ import annotations

import os
from datetime import timedelta

import pendulum
from airflow.sdk import DAG

from airflow_distributed.operators import DistributedTrainingOperator

START = pendulum.datetime(2026, 1, 1, tz="UTC")


def _train_dag(dag_id: str, deferrable: bool, backend: str = "kubernetes", **task_kwargs) -> DAG:
    """A DAG of one training task (the kubernetes backend unless told) in the namespace of its id (two workers
    unless told)."""
    task_kwargs.setdefault("environment", {"pytorch": {"n_workers": 2}})
    with DAG(dag_id=dag_id, schedule=None, start_date=START, catchup=False, tags=["test", backend]) as dag:
        DistributedTrainingOperator(
            task_id="train", framework="pytorch", command=["python", "/opt/jobs/train.py"],
            image="registry.example.com/trainer:1.0", backend=backend, namespace=dag_id.replace("_", "-"),
            deferrable=deferrable, **task_kwargs)
    return dag


for dag_id, deferrable in (("k8s_timed_out", False), ("k8s_timed_out_deferrable", True)):
    _train_dag(dag_id, deferrable, execution_timeout=timedelta(seconds=5))

_train_dag("k8s_deferred_logs", True, logging_interval=0.5, startup_timeout=60)

# Two replicas of two processes on two GPUs each ("auto": one process per GPU): what the table, the job record and
# its usage count of them, in the task and in the triggerer.
for dag_id, deferrable in (("k8s_nproc", False), ("k8s_nproc_deferrable", True)):
    _train_dag(dag_id, deferrable, environment={
        "resources": {"gpu": {"limits": 2}},
        "pytorch": {"n_workers": 1, "n_proc_per_node": "auto",
                    "default_worker": {"resources": {"gpu": {"limits": 2}}}}},
        startup_timeout=60)

# The hang watchdog: progress_timeout of a few seconds; the task's execution_timeout is the slack past which a
# watchdog that did not fire fails the task otherwise (AirflowTaskTimeout, not JobHungError).
# The slow master prints every 4 s: 10 s leaves room for a look (every 2.5 s) late on a loaded machine.
for dag_id, deferrable, quiet in (("k8s_hung", False, 6), ("k8s_hung_deferrable", True, 6),
                                  ("k8s_slow_reporting", False, 10), ("k8s_slow_reporting_deferrable", True, 10)):
    _train_dag(dag_id, deferrable, progress_timeout=timedelta(seconds=quiet), startup_timeout=60,
               execution_timeout=timedelta(seconds=60))

# Waiting for capacity: worker 1 asks for 16 GPUs and the session's node has 8, so the real scheduler leaves it
# Unschedulable until a test adds a node that has them. startup_timeout is far shorter than that wait: only
# queue_timeout bounds it (the 90 s of a real wait compressed to seconds).
_GPU_HUNGRY = {"pytorch": {"n_workers": 2, "worker": [{"index": 1, "resources": {"gpu": {"requests": 16,
                                                                                          "limits": 16}}}]}}
for dag_id, deferrable, queue in (("k8s_queued_then_scheduled", False, 600.0),
                                  ("k8s_queued_then_scheduled_deferrable", True, 600.0),
                                  ("k8s_queue_timeout", False, 4.0)):
    _train_dag(dag_id, deferrable, environment=_GPU_HUNGRY, startup_timeout=3, queue_timeout=queue,
               execution_timeout=timedelta(seconds=120))

# A worker evicted (the Eviction API) or deleted (kubectl delete pod) mid-training, on each cluster backend (its
# DAG id's prefix): retries=2 under the provider's retry policy; retry_delay is half an hour the policy overrides
# (without it the retry would come 30 minutes later). The checkpoints go where the test, playing the master, can
# reach them: the same folder for every try of the task instance, as a shared volume would be on a cluster.
for prefix, backend in (("k8s", "kubernetes"), ("kubeflow", "kubeflow"), ("trainjob", "trainjob")):
    for dag_id, deferrable in ((f"{prefix}_{how}_resumes{suffix}", suffix != "") for how in ("evicted", "deleted")
                               for suffix in ("", "_deferrable")):
        _train_dag(dag_id, deferrable, backend, environment={"pytorch": {"n_workers": 1}},
                   checkpoint_dir=os.path.join(os.environ.get("AIRFLOW_HOME", "/tmp"), "checkpoints", dag_id),
                   retries=2, retry_delay=timedelta(minutes=30), startup_timeout=60,
                   execution_timeout=timedelta(seconds=120))

# A script that fails every try: try 1's finished pods are kept for try 2, which finds them; after try 2, the last,
# nothing of the job is left. The retry's few seconds let the test see what try 1 left before try 2 starts.
for dag_id, deferrable in (("k8s_last_try_fails", False), ("k8s_last_try_fails_deferrable", True)):
    _train_dag(dag_id, deferrable, environment={"pytorch": {"n_workers": 1}}, retries=1,
               retry_delay=timedelta(seconds=5), startup_timeout=60, execution_timeout=timedelta(seconds=120))

# The hang watchdog on a PyTorchJob (the stand-in Training Operator makes the pods), in the task and the triggerer.
for dag_id, deferrable in (("kubeflow_hung", False), ("kubeflow_hung_deferrable", True)):
    with DAG(dag_id=dag_id, schedule=None, start_date=START, catchup=False, tags=["test", "kubeflow"]):
        DistributedTrainingOperator(
            task_id="train", framework="pytorch", environment={"pytorch": {"n_workers": 1}},
            command=["python", "/opt/jobs/train.py"], image="registry.example.com/trainer:1.0", backend="kubeflow",
            namespace=dag_id.replace("_", "-"), deferrable=deferrable, progress_timeout=timedelta(seconds=6),
            execution_timeout=timedelta(seconds=60))

# A PyTorchJob whose task loses its RoleBindings mid-wait: a watch a second, so the refused one comes at once.
for dag_id, deferrable in (("kubeflow_forbidden", False), ("kubeflow_forbidden_deferrable", True)):
    with DAG(dag_id=dag_id, schedule=None, start_date=START, catchup=False, tags=["test", "kubeflow"]):
        DistributedTrainingOperator(
            task_id="train", framework="pytorch", environment={"pytorch": {"n_workers": 1}},
            command=["python", "/opt/jobs/train.py"], image="registry.example.com/trainer:1.0", backend="kubeflow",
            namespace=dag_id.replace("_", "-"), deferrable=deferrable, watch_timings={"server_timeout": 1},
            execution_timeout=timedelta(seconds=60))

"""DAGs for the Ray backend's tests, run against a real local Ray cluster (connection ``ray_default``).

The replicas run the example training scripts with the interpreter of the tests (a Ray Job's entrypoint runs with
the cluster's PATH, so it is named); each replica reserves half a core so that a job of three fits a cluster sized
for two cores. Models go under ``$AIRFLOW_HOME``, which the test session removes.
"""

from __future__ import annotations

import os
import sys
from datetime import timedelta
from pathlib import Path

import pendulum
from airflow.sdk import DAG

from airflow_distributed.operators import DistributedTrainingOperator
from tests.hang_scripts import BURST_THEN_HANG, GLOO_HANG, SLOW_BUT_REPORTING
from tests.process_variables import PRELUDE

TRAINING_DIR = Path(__file__).resolve().parents[2] / "example_dags" / "training"
START = pendulum.datetime(2026, 1, 1, tz="UTC")
MODELS = os.path.join(os.environ.get("AIRFLOW_HOME", "/tmp"), "ray-models")
HALF_A_CORE = {"resources": {"limits": {"cpu": 0.5}}}


def _dag(dag_id: str, script: str, args: list[str], *, framework: str = "pytorch", **task_kwargs) -> DAG:
    """A job of a master and two workers running the example script ``script``."""
    return _job_dag(dag_id, ["python", str(TRAINING_DIR / script), *args], framework=framework, **task_kwargs)


def _job_dag(dag_id: str, command: list[str], *, framework: str = "pytorch", **task_kwargs) -> DAG:
    with DAG(dag_id=dag_id, schedule=None, start_date=START, catchup=False, tags=["test", "ray"]) as dag:
        DistributedTrainingOperator(
            task_id="train",
            framework=framework,
            environment={framework: {"n_workers": 2, "default_worker": HALF_A_CORE}, **HALF_A_CORE},
            command=command,
            backend="ray",
            python=sys.executable,
            model_dir=os.path.join(MODELS, dag_id),
            stop_grace_period=1.0,
            settle_period=2.0,
            **task_kwargs,
        )
    return dag


quick = ["--steps", "20"]
slow = ["--steps", "100000", "--sleep-per-step", "0.05"]
# Checkpoints every 5 steps, removed once the job succeeds (keep_checkpoints=False). Its steps take 0.25 s: the
# driver's live report (every 2 s) is seen by the task's polls (every second) while the job runs.
ddp = _dag("ray_pytorch_ddp", "pytorch_ddp.py", [*quick, "--sleep-per-step", "0.25", "--checkpoint-every", "5"])
ddp_deferrable = _dag("ray_pytorch_ddp_deferrable", "pytorch_ddp.py", quick, deferrable=True)
# Rank 2 (worker-1) fails; the others would run for an hour: only the backend stops them.
CRASH = ("import os, sys, time; rank = int(os.environ['RANK']); print(f'rank {rank} up', flush=True); "
         "time.sleep(2); print('worker-1 gives up', flush=True) if rank == 2 else None; "
         "sys.exit(3) if rank == 2 else time.sleep(3600)")
with DAG(dag_id="ray_worker_crash", schedule=None, start_date=START, catchup=False, tags=["test", "ray"]) as crash_dag:
    DistributedTrainingOperator(
        task_id="train", framework="pytorch", backend="ray", python=sys.executable, command=["python", "-c", CRASH],
        environment={"pytorch": {"n_workers": 2, "default_worker": HALF_A_CORE}, **HALF_A_CORE},
        model_dir=os.path.join(MODELS, "ray_worker_crash"), stop_grace_period=1.0,
        execution_timeout=timedelta(seconds=120),
    )
long_running = _dag("ray_long_running", "pytorch_ddp.py", slow)
timeout = _dag("ray_timeout", "pytorch_ddp.py", slow, execution_timeout=timedelta(seconds=15))
# A retry of a task whose worker died: the Ray Job of the earlier try is still running and is waited for again.
reattach = _dag("ray_reattach", "pytorch_ddp.py", ["--steps", "150", "--sleep-per-step", "0.05"])
tensorflow = _dag("ray_tensorflow_multiworker", "tensorflow_multiworker.py", ["--steps", "20"],
                  framework="tensorflow", env={"TF_CPP_MIN_LOG_LEVEL": "2"})
xgboost = _dag("ray_xgboost", "xgboost_dist.py", ["--steps", "8"], framework="xgboost")
# A task SIGKILLed while its job runs: nothing renews the job's liveness, whose grace is compressed to seconds.
abandoned = _dag("ray_abandoned", "pytorch_ddp.py", slow, ray_options={"liveness_grace": 6.0})
# One node only: three bundles on three nodes cannot be placed, and the job says why once startup_timeout passes.
strict_spread = _dag("ray_strict_spread", "pytorch_ddp.py", quick, startup_timeout=3.0,
                     ray_options={"placement_strategy": "STRICT_SPREAD"})
# The test cluster's head has 2 of custom resource "ssd" (tests.ray_cluster), none of "fpga".
custom_resources = _dag("ray_custom_resources", "pytorch_ddp.py", quick, ray_options={"resources": {"ssd": 0.5}})
missing_resource = _dag("ray_missing_resource", "pytorch_ddp.py", quick, startup_timeout=3.0,
                        ray_options={"resources": {"fpga": 1}})
jax = _dag("ray_jax", "jax_data_parallel.py", ["--steps", "20"], framework="jax")
# Paddle runs in its own virtualenv (``make paddle``): the replicas' command names that interpreter, the driver
# keeps the cluster's.
PADDLE_PYTHON = Path(__file__).resolve().parents[2] / ".venvs" / "paddle" / "bin" / "python"
with DAG(dag_id="ray_paddle", schedule=None, start_date=START, catchup=False, tags=["test", "ray"]) as paddle_dag:
    DistributedTrainingOperator(
        task_id="train", framework="paddle", backend="ray", python=sys.executable,
        command=[str(PADDLE_PYTHON), str(TRAINING_DIR / "paddle_collective.py"), *quick],
        environment={"paddle": {"n_workers": 2, "default_worker": HALF_A_CORE}, **HALF_A_CORE},
        model_dir=os.path.join(MODELS, "ray_paddle"), stop_grace_period=1.0, settle_period=2.0,
    )
# The hang watchdog, kept by the driver: the master and worker 0 block in a gloo all-reduce worker 1 never joins,
# in the task's wait and in the triggerer's; a job slow but reporting each step is not hung.
# execution_timeout: without the watchdog, the test fails in minutes rather than at gloo's own timeout.
_hangs = {"progress_timeout": timedelta(seconds=10), "execution_timeout": timedelta(minutes=2)}
hung = _job_dag("ray_hung", ["python", "-c", GLOO_HANG], **_hangs)
hung_deferrable = _job_dag("ray_hung_deferrable", ["python", "-c", GLOO_HANG], deferrable=True, **_hangs)
slow_but_reporting = _job_dag("ray_slow_but_reporting", ["python", "-c", SLOW_BUT_REPORTING], progress_timeout=5.0)
# The hang: every rank reports steps 1 to 10 (log_progress and log_metrics) 0.2 s apart, well within one live
# record interval, then the master and worker 0 block in an all-reduce worker 1 never joins; the failure must name
# the master's last report, step 10, and time the silence from it, in both wait modes.
_burst = {"progress_timeout": timedelta(seconds=10), "execution_timeout": timedelta(minutes=2)}
burst_hang = _job_dag("ray_burst_hang", ["python", "-c", BURST_THEN_HANG], **_burst)
burst_hang_deferrable = _job_dag("ray_burst_hang_deferrable", ["python", "-c", BURST_THEN_HANG], deferrable=True,
                                 **_burst)
# Several processes per replica: 2 replicas of 2 processes, one actor each running torch's launcher; every process
# prints its rank variables first (tests.process_variables). A quarter of a core per process: the job fits a cluster
# sized for two cores.
with DAG(dag_id="ray_nproc_ddp", schedule=None, start_date=START, catchup=False, tags=["test", "ray"]) as nproc_dag:
    DistributedTrainingOperator(
        task_id="train", framework="pytorch", backend="ray", python=sys.executable,
        command=["python", "-c", PRELUDE, str(TRAINING_DIR / "pytorch_ddp.py"), *quick],
        environment={"pytorch": {"n_workers": 1, "n_proc_per_node": 2}, **HALF_A_CORE},
        model_dir=os.path.join(MODELS, "ray_nproc_ddp"), stop_grace_period=1.0, settle_period=2.0,
    )
# One replica of 3 processes, 2 blocked in a gloo all-reduce that the third never joins: the driver's hang watchdog
# asks every process of the replica for its stacks, though torch's launcher started each in a session of its own.
with DAG(dag_id="ray_nproc_hung", schedule=None, start_date=START, catchup=False, tags=["test", "ray"]) as nproc_hung:
    DistributedTrainingOperator(
        task_id="train", framework="pytorch", backend="ray", python=sys.executable, command=["python", "-c", GLOO_HANG],
        environment={"pytorch": {"n_workers": 0, "n_proc_per_node": 3}, **HALF_A_CORE},
        model_dir=os.path.join(MODELS, "ray_nproc_hung"), stop_grace_period=1.0, retries=0, **_hangs)
# 2 replicas of 2 processes that would train for an hour: for the tests that end them from outside.
with DAG(dag_id="ray_nproc_long", schedule=None, start_date=START, catchup=False, tags=["test", "ray"]) as nproc_long:
    DistributedTrainingOperator(
        task_id="train", framework="pytorch", backend="ray", python=sys.executable,
        command=["python", str(TRAINING_DIR / "pytorch_ddp.py"), *slow],
        environment={"pytorch": {"n_workers": 1, "n_proc_per_node": 2}, **HALF_A_CORE},
        model_dir=os.path.join(MODELS, "ray_nproc_long"), stop_grace_period=1.0, retries=0)

"""Check d: DeepSpeed on the GPUs: one replica with every visible GPU, ``n_proc_per_node="auto"``, started by
DeepSpeed's launcher (``launcher="deepspeed"``), a tiny model under ZeRO stage 2, NCCL (gloo in the dry run).

The replicas run ``GPU_CHECK_PYTHON`` when run.py sets it (the dry run's ``.venvs/launchers``), else Airflow's
interpreter; run.py skips this check where that interpreter cannot import deepspeed.
"""

from __future__ import annotations

from typing import Any

from airflow.sdk import DAG, task
from gpu_check_kit import DEVICE, GPUS, PYTHON, START, TRAINING, VISIBLE, job_problems, judge, training_task

CHECK = "d"

with DAG(dag_id="gpu_check_d_deepspeed", schedule=None, start_date=START, catchup=False, tags=["gpu-check"]):
    train = training_task(
        CHECK, {"pytorch": {"n_workers": 0, "n_proc_per_node": "auto", "launcher": "deepspeed"},
                "resources": {"gpu": {"limits": GPUS}}},
        minutes=5, script=TRAINING / "gpu_deepspeed.py", python=PYTHON)

    @task
    def verify(metrics: dict[str, Any]) -> dict[str, Any]:
        problems = job_problems(metrics, world_size=GPUS)
        if metrics.get("zero_stage") != 2:
            problems.append(f"ZeRO stage {metrics.get('zero_stage')}, expected 2")
        processes = metrics.get("processes") or []
        expected = [str(rank) for rank in range(GPUS)]
        for name in ("RANK", "LOCAL_RANK"):
            got = sorted(str(process.get(name)) for process in processes)
            if got != expected:
                problems.append(f"{name} of the processes: {got}, expected {expected}")
        # DeepSpeed's launcher sets each process's CUDA_VISIBLE_DEVICES from its --world_info slots: they must be
        # the GPUs the local backend gave the replica (all of them here), not some others.
        for process in processes:
            if process.get("CUDA_VISIBLE_DEVICES") != VISIBLE:
                problems.append(f"rank {process.get('RANK')} saw CUDA_VISIBLE_DEVICES="
                                f"{process.get('CUDA_VISIBLE_DEVICES')}, not the replica's GPUs {VISIBLE}")
        devices = [process.get("device") for process in processes]
        if DEVICE == "cuda" and len(set(devices)) != GPUS:
            problems.append(f"the processes used {devices}: not one GPU each")
        facts = {key: metrics.get(key) for key in ("backend", "world_size", "zero_stage", "initial_loss",
                                                   "final_loss", "torch_version", "torch_cuda", "deepspeed_version")}
        facts.update(mode=DEVICE, gpus=GPUS, processes=processes)
        return judge(CHECK, problems, facts)

    verify(train.output["metrics"])

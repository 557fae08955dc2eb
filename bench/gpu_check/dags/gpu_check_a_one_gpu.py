"""Check a: a PyTorch master asking for one GPU (no workers), an NCCL process group of one, on the local backend."""

from __future__ import annotations

from typing import Any

from airflow.sdk import DAG, task
from gpu_check_kit import DEVICE, START, job_problems, judge, training_task

CHECK = "a"

with DAG(dag_id="gpu_check_a_one_gpu", schedule=None, start_date=START, catchup=False, tags=["gpu-check"]):
    train = training_task(CHECK, {"pytorch": {"n_workers": 0}, "resources": {"gpu": {"limits": 1}}}, minutes=3)

    @task
    def verify(metrics: dict[str, Any]) -> dict[str, Any]:
        problems = job_problems(metrics, world_size=1)
        process = (metrics.get("processes") or [{}])[0]  # one: job_problems has checked the world size
        # The replica must see exactly the GPU it was given, whatever the machine has.
        if process.get("CUDA_VISIBLE_DEVICES") in ("<unset>", ""):
            problems.append(f"the replica was given CUDA_VISIBLE_DEVICES={process.get('CUDA_VISIBLE_DEVICES')}")
        elif len(process["CUDA_VISIBLE_DEVICES"].split(",")) != 1:
            problems.append(f"the replica sees {process['CUDA_VISIBLE_DEVICES']}, not one GPU")
        facts = {key: metrics.get(key) for key in ("backend", "device", "world_size", "torch_version", "torch_cuda")}
        facts.update(device_name=process.get("device_name"), cuda_visible_devices=process.get("CUDA_VISIBLE_DEVICES"),
                     mode=DEVICE)
        return judge(CHECK, problems, facts)

    verify(train.output["metrics"])

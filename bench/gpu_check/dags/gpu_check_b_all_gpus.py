"""Check b: one replica with every visible GPU and ``n_proc_per_node="auto"``: a process per GPU, NCCL across them.

A build whose spec refuses ``n_proc_per_node`` on the local backend fails this file's parse; run.py reports that
refusal as "not supported by this build".
"""

from __future__ import annotations

from typing import Any

from airflow.sdk import DAG, task
from gpu_check_kit import DEVICE, GPUS, START, job_problems, judge, training_task

CHECK = "b"

with DAG(dag_id="gpu_check_b_all_gpus", schedule=None, start_date=START, catchup=False, tags=["gpu-check"]):
    train = training_task(
        CHECK, {"pytorch": {"n_workers": 0, "n_proc_per_node": "auto"}, "resources": {"gpu": {"limits": GPUS}}},
        minutes=4)

    @task
    def verify(metrics: dict[str, Any]) -> dict[str, Any]:
        problems = job_problems(metrics, world_size=GPUS)
        processes = metrics.get("processes") or []
        expected = list(range(GPUS))
        for name, want in (("RANK", expected), ("LOCAL_RANK", expected), ("LOCAL_WORLD_SIZE", [GPUS] * GPUS),
                           ("NODE_RANK", [0] * GPUS)):
            got = sorted(process.get(name) for process in processes)
            if got != want:
                problems.append(f"{name} of the processes: {got}, expected {want}")
        devices = [process.get("device") for process in processes]
        if DEVICE == "cuda" and len(set(devices)) != GPUS:
            problems.append(f"the processes used {devices}: not one GPU each")
        facts = {"mode": DEVICE, "gpus": GPUS, "backend": metrics.get("backend"),
                 "processes": [{key: process.get(key) for key in ("RANK", "LOCAL_RANK", "LOCAL_WORLD_SIZE",
                                                                  "NODE_RANK", "CUDA_VISIBLE_DEVICES", "device",
                                                                  "device_name")}
                               for process in processes]}
        return judge(CHECK, problems, facts)

    verify(train.output["metrics"])

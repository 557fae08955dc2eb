"""What the GPU check's DAGs share; set by ``bench/gpu_check/run.py`` through the environment.

Read when a DAG file is parsed: ``GPU_CHECK_DEVICE`` (``cuda``, or ``cpu`` for the dry run: gloo instead of NCCL,
the GPUs faked with ``CUDA_VISIBLE_DEVICES``, which the local backend counts), ``GPU_CHECK_GPUS`` (how many GPUs
the local backend sees: the number the checks ask for, or ask one more than), ``GPU_CHECK_VISIBLE`` (their ids,
comma-separated: what a replica given every GPU must see). Read when a task runs:
``GPU_CHECK_RESULTS``, the folder each check writes ``<check>.json`` to and the replicas mark their start in.
``GPU_CHECK_PYTHON`` (read at parse time, set by run.py for check d): the interpreter the replicas run, when it is
not Airflow's (the dry run's ``.venvs/launchers``, which has DeepSpeed).
"""

from __future__ import annotations

import json
import os
from datetime import timedelta
from pathlib import Path
from typing import Any

import pendulum

from airflow_distributed.operators import DistributedTrainingOperator

TRAINING = Path(__file__).resolve().parent.parent / "training"
SCRIPT = TRAINING / "gpu_replica.py"
DEVICE = os.environ.get("GPU_CHECK_DEVICE", "cuda")
BACKEND = "nccl" if DEVICE == "cuda" else "gloo"
GPUS = int(os.environ.get("GPU_CHECK_GPUS", "1"))
VISIBLE = os.environ.get("GPU_CHECK_VISIBLE", "")
START = pendulum.datetime(2026, 1, 1, tz="UTC")
PYTHON = os.environ.get("GPU_CHECK_PYTHON") or None


def results_dir() -> Path:
    folder = Path(os.environ["GPU_CHECK_RESULTS"])
    folder.mkdir(parents=True, exist_ok=True)
    return folder


def started_dir(check: str) -> str:
    """Where the replicas of ``check`` mark their start (``gpu_replica.py --started``)."""
    return str(results_dir() / f"{check}-started")


def replica_args(check: str, steps: int = 20) -> list[str]:
    return ["--backend", BACKEND, "--device", DEVICE, "--steps", str(steps), "--started", started_dir(check)]


def training_task(check: str, environment: dict[str, Any], minutes: int, script: Path = SCRIPT,
                  **kwargs: Any) -> DistributedTrainingOperator:
    """The check's PyTorch job on the local backend: ``script`` (default ``gpu_replica.py``) in every process of
    ``environment``."""
    return DistributedTrainingOperator(
        task_id="train",
        framework="pytorch",
        backend="local",
        environment=environment,
        command=["python", str(script)],
        args=replica_args(check),
        env={"NCCL_DEBUG": "WARN"},  # NCCL says why when it cannot set up
        execution_timeout=timedelta(minutes=minutes),
        **kwargs,
    )


def write_result(check: str, result: dict[str, Any]) -> None:
    """The check's verdict and facts, for run.py's table and JSON."""
    path = results_dir() / f"{check}.json"
    path.write_text(json.dumps(result, indent=1, sort_keys=True, default=str), encoding="utf-8")


def judge(check: str, problems: list[str], facts: dict[str, Any]) -> dict[str, Any]:
    """Write the verdict; fail the task when a problem was found, so the run's state says it too."""
    write_result(check, {"ok": not problems, "problems": problems, "facts": facts})
    if problems:
        raise ValueError(f"check {check} failed: {'; '.join(problems)}")
    return facts


def job_problems(metrics: dict[str, Any], world_size: int) -> list[str]:
    """What every training check asks of the job's report: its size, backend, all-reduce and training."""
    problems = []
    if metrics.get("world_size") != world_size:
        problems.append(f"world size {metrics.get('world_size')}, expected {world_size}")
    if metrics.get("backend") != BACKEND:
        problems.append(f"process group backend {metrics.get('backend')!r}, expected {BACKEND!r}")
    if metrics.get("allreduce") != metrics.get("allreduce_expected"):
        problems.append(f"all-reduce gave {metrics.get('allreduce')}, expected {metrics.get('allreduce_expected')}")
    if not metrics.get("parameters_identical"):
        problems.append("the ranks' parameters differ after training")
    if not metrics.get("final_loss", float("inf")) < metrics.get("initial_loss", float("-inf")):
        problems.append("the loss did not go down")
    for process in metrics.get("processes") or []:
        if DEVICE == "cuda" and not str(process.get("device", "")).startswith("cuda"):
            problems.append(f"rank {process.get('RANK')} ran on {process.get('device')}, not a GPU")
    return problems

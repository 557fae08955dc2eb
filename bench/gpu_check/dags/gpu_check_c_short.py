"""Check c: a job asking one GPU more than the machine has is refused before any replica starts.

The training task must fail; its failure callback writes the error it failed with, and run.py checks that the
message names the GPUs asked for and those visible, and that no replica marked its start.
"""

from __future__ import annotations

from typing import Any

from airflow.sdk import DAG
from gpu_check_kit import GPUS, START, training_task, write_result

CHECK = "c"


def record_refusal(context: Any) -> None:
    error = context.get("exception")
    write_result(CHECK, {"error_type": type(error).__name__, "message": str(error), "asked": GPUS + 1,
                         "visible": GPUS})


with DAG(dag_id="gpu_check_c_short", schedule=None, start_date=START, catchup=False, tags=["gpu-check"]):
    training_task(CHECK, {"pytorch": {"n_workers": 0}, "resources": {"gpu": {"limits": GPUS + 1}}}, minutes=2,
                  on_failure_callback=record_refusal)

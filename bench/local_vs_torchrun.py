"""Wall time of the PyTorch example job through the operator vs the same script under torchrun, side by side.

Same script, same replicas (3 processes), same steps. The operator's time is its task's run time in a real
Airflow (``dag.test()`` on SQLite, from task start to task end, so the operator's own set-up and tear-down
count); torchrun's is the wall time of ``torchrun --standalone --nproc-per-node 3``. Rounds alternate.
Target: ratio (operator / torchrun) <= 1.10.
"""

from __future__ import annotations

import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SCRIPT = ROOT / "example_dags" / "training" / "pytorch_ddp.py"


def _airflow_env(home: Path) -> None:
    os.environ["AIRFLOW_HOME"] = str(home)
    os.environ["AIRFLOW__CORE__DAGS_FOLDER"] = str(ROOT / "example_dags")
    os.environ["AIRFLOW__CORE__LOAD_EXAMPLES"] = "False"
    subprocess.run([str(Path(sys.executable).with_name("airflow")), "db", "migrate"], check=True,
                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


def operator_run(steps: int) -> float:
    from airflow.dag_processing.dagbag import DagBag

    dag = DagBag().get_dag("example_pytorch_ddp")
    run = dag.test(run_conf={"steps": steps})
    ti = next(t for t in run.get_task_instances() if t.task_id == "train")
    assert ti.state == "success", ti.state
    return (ti.end_date - ti.start_date).total_seconds()


def torchrun_run(steps: int) -> float:
    torchrun = Path(sys.executable).with_name("torchrun")
    started = time.perf_counter()
    subprocess.run([str(torchrun), "--standalone", "--nnodes", "1", "--nproc-per-node", "3", str(SCRIPT),
                    "--steps", str(steps)], check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    return time.perf_counter() - started


def measure(rounds: int = 3, steps: int = 300) -> dict:
    home = Path(tempfile.mkdtemp(prefix="bench-airflow-"))
    try:
        _airflow_env(home)
        operator_times, torchrun_times = [], []
        for _ in range(rounds):
            operator_times.append(operator_run(steps))
            torchrun_times.append(torchrun_run(steps))
    finally:
        shutil.rmtree(home, ignore_errors=True)
    op, tr = statistics.median(operator_times), statistics.median(torchrun_times)
    return {"rounds": rounds, "steps": steps, "replicas": 3, "operator_seconds": operator_times,
            "torchrun_seconds": torchrun_times, "ratio": op / tr}


if __name__ == "__main__":
    print(json.dumps(measure(), indent=2))

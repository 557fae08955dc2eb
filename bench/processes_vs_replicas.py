"""One replica of 4 processes vs 4 replicas of one process: the PyTorch DDP example on the local backend, side by side.

Both jobs train the same script for the same steps at world size 4 over gloo, through the operator in a real
Airflow (``dag.test()`` on SQLite, task start to task end). One is ``{"pytorch": {"n_workers": 0, "n_proc_per_node":
4}}``: the master alone, running torch's launcher, which starts the 4 processes; the other ``{"pytorch":
{"n_workers": 3}}``: 4 replicas started by the task. Rounds alternate; medians. Report: ratio (processes /
replicas), the cost of the launcher in between (one more interpreter importing torch, its rendezvous).
"""

from __future__ import annotations

import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SCRIPT = ROOT / "example_dags" / "training" / "pytorch_ddp.py"
SHAPES = {"processes": {"n_workers": 0, "n_proc_per_node": 4}, "replicas": {"n_workers": 3}}


# Both jobs, in a DAG file of the bench's own DAGs folder (dag.test() runs only DAGs Airflow has parsed).
DAG_FILE = f"""
import pendulum
from airflow.sdk import DAG
from airflow_distributed.operators import DistributedTrainingOperator

for shape, cluster in {SHAPES!r}.items():
    with DAG(dag_id=f"bench_{{shape}}", schedule=None, start_date=pendulum.datetime(2026, 1, 1, tz="UTC"),
             catchup=False):
        DistributedTrainingOperator(task_id="train", framework="pytorch", environment={{"pytorch": cluster}},
                                    command=["python", {str(SCRIPT)!r}, "--steps", "{{{{ dag_run.conf['steps'] }}}}"],
                                    settle_period=0.2)
"""


def _airflow_env(home: Path) -> None:
    dags = home / "dags"
    dags.mkdir()
    (dags / "bench_processes_vs_replicas.py").write_text(DAG_FILE)
    os.environ["AIRFLOW_HOME"] = str(home)
    os.environ["AIRFLOW__CORE__DAGS_FOLDER"] = str(dags)
    os.environ["AIRFLOW__CORE__LOAD_EXAMPLES"] = "False"
    subprocess.run([str(Path(sys.executable).with_name("airflow")), "db", "migrate"], check=True,
                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


def run_once(shape: str, steps: int) -> float:
    from airflow.dag_processing.dagbag import DagBag

    run = DagBag().get_dag(f"bench_{shape}").test(run_conf={"steps": steps})
    ti = next(t for t in run.get_task_instances() if t.task_id == "train")
    assert ti.state == "success", ti.state
    return (ti.end_date - ti.start_date).total_seconds()


def measure(rounds: int = 3, steps: int = 100) -> dict:
    home = Path(tempfile.mkdtemp(prefix="bench-airflow-"))
    times: dict[str, list[float]] = {shape: [] for shape in SHAPES}
    try:
        _airflow_env(home)
        for _ in range(rounds):
            for shape in SHAPES:
                times[shape].append(run_once(shape, steps))
    finally:
        shutil.rmtree(home, ignore_errors=True)
    medians = {shape: statistics.median(values) for shape, values in times.items()}
    return {"rounds": rounds, "steps": steps, "world_size": 4, "seconds": times, "medians": medians,
            "ratio": medians["processes"] / medians["replicas"]}


if __name__ == "__main__":
    print(json.dumps(measure(), indent=2))

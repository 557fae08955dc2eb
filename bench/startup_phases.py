"""A local job's startup phases, and what recording them costs the task.

The PyTorch example's script (``example_dags/training/pytorch_ddp.py``, gloo, ``tracking.log_progress`` every step)
as a job of 3 and of 12 replicas, run by the operator in a real Airflow (``dag.test()`` on SQLite). For each size,
3 rounds alternating with and without recording: the phases are the ``job`` XCom's ``startup`` (medians of the
rounds with it); the cost is the CPU time of the task's process (``time.process_time``: its threads included, the
replicas' processes not) with the recording and with it switched off (``local_startup`` returning nothing, the
``StartupNote`` a no-op; the per-line check of the first line and the first progress record stays), as a ratio of
medians.

    PYTHONPATH=$PWD .venv/bin/python bench/startup_phases.py [--rounds 3] [--steps 20]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
SIZES = (3, 12)

DAG_FILE = '''
import pendulum
from airflow.sdk import DAG
from airflow_distributed.operators import DistributedTrainingOperator

for replicas in {sizes!r}:
    with DAG(dag_id=f"bench_startup_{{replicas}}", schedule=None, start_date=pendulum.datetime(2026, 1, 1, tz="UTC"),
             catchup=False, params={{"steps": 20}}) as dag:
        DistributedTrainingOperator(
            task_id="train", framework="pytorch", environment={{"pytorch": {{"n_workers": replicas - 1}}}},
            command=["python", {script!r}], args=["--steps", "{{{{ params.steps }}}}"])
    globals()[dag.dag_id] = dag
'''


def _airflow(home: Path) -> None:
    dags = home / "dags"
    dags.mkdir(parents=True)
    (dags / "bench_startup.py").write_text(DAG_FILE.format(
        sizes=SIZES, script=str(ROOT / "example_dags" / "training" / "pytorch_ddp.py")))
    os.environ["AIRFLOW_HOME"] = str(home)
    os.environ["AIRFLOW__CORE__DAGS_FOLDER"] = str(dags)
    os.environ["AIRFLOW__CORE__LOAD_EXAMPLES"] = "False"
    subprocess.run([str(Path(sys.executable).with_name("airflow")), "db", "migrate"], check=True,
                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


def _recording(on: bool) -> None:
    """Switch the recording of the startup phases on or off in the local backend (this process)."""
    from airflow_distributed.backends import local_run

    saved = getattr(_recording, "saved", None)
    if saved is None:
        saved = _recording.saved = (local_run.local_startup, local_run.StartupNote.__call__)  # type: ignore[attr-defined]
    if on:
        local_run.local_startup, local_run.StartupNote.__call__ = saved
    else:
        local_run.local_startup = lambda created, job: {}
        local_run.StartupNote.__call__ = lambda self: None


def _run(dag_id: str, steps: int) -> tuple[float, float, dict[str, Any] | None]:
    """(CPU seconds of this process over the run, the task's run time, the job's ``startup``)."""
    from airflow.dag_processing.dagbag import DagBag
    from airflow.models.xcom import XComModel
    from airflow.utils.session import create_session

    dag = DagBag().get_dag(dag_id)
    cpu = time.process_time()
    run = dag.test(run_conf={"steps": steps})
    cpu = time.process_time() - cpu
    ti = next(t for t in run.get_task_instances() if t.task_id == "train")
    assert ti.state == "success", ti.state
    with create_session() as session:
        row = session.execute(XComModel.get_many(run_id=run.run_id, dag_ids=dag_id, task_ids="train",
                                                 key="job")).first()
        record = XComModel.deserialize_value(row[0])
    return cpu, (ti.end_date - ti.start_date).total_seconds(), record.get("startup")


def measure(rounds: int = 3, steps: int = 20) -> dict[str, Any]:
    home = Path(tempfile.mkdtemp(prefix="bench-startup-"))
    results: dict[str, Any] = {"rounds": rounds, "steps": steps}
    try:
        _airflow(home)
        for size in SIZES:
            with_cpu, without_cpu, task_seconds, phases = [], [], [], []
            for round_ in range(rounds):
                order = (True, False) if round_ % 2 == 0 else (False, True)
                for on in order:
                    _recording(on)
                    cpu, seconds, startup = _run(f"bench_startup_{size}", steps)
                    (with_cpu if on else without_cpu).append(round(cpu, 3))
                    if on:
                        task_seconds.append(round(seconds, 3))
                        phases.append(startup or {})
            _recording(True)
            job = {phase: statistics.median(p["job"][phase] for p in phases)
                   for phase in ("running", "rendezvous") if all(p["job"].get(phase) is not None for p in phases)}
            firsts = [max(r["rendezvous"] for r in p["replicas"].values() if r["rendezvous_by"] == "line")
                      for p in phases if any(r["rendezvous_by"] == "line" for r in p["replicas"].values())]
            results[f"{size}_replicas"] = {
                "job_phases_median_seconds": job,
                "rendezvous_by": sorted({p.get("rendezvous_by") for p in phases}),
                "last_worker_first_line_median_seconds": statistics.median(firsts) if firsts else None,
                "task_seconds": task_seconds,
                "cpu_seconds_with": with_cpu, "cpu_seconds_without": without_cpu,
                "cpu_ratio": round(statistics.median(with_cpu) / statistics.median(without_cpu), 3),
                "rounds_phases": [p["job"] for p in phases],
            }
    finally:
        shutil.rmtree(home, ignore_errors=True)
    return results


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--steps", type=int, default=20)
    options = parser.parse_args()
    print(json.dumps(measure(options.rounds, options.steps), indent=2))

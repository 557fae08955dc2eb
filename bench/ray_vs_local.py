"""Wall time of the same 3-replica PyTorch job on ``backend="ray"`` vs ``backend="local"``, side by side.

Same script (``pytorch_ddp.py``), same spec (a master and two workers, half a core reserved each), same steps,
both through the operator in a real Airflow (``dag.test()`` on SQLite; the task's run time, start to end). The
Ray job runs on a real local Ray cluster started for the benchmark (``tests.ray_cluster``, loopback only) and
stopped after it; its time includes the submission, the driver's start, the placement group and the actors.
Rounds alternate. Reported: ratio (ray / local) of the medians.
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
sys.path.insert(0, str(ROOT))

from tests.ray_cluster import LOOPBACK_ONLY, RayCluster  # noqa: E402

SCRIPT = ROOT / "example_dags" / "training" / "pytorch_ddp.py"
DAGS = f'''
import os
import sys
import pendulum
from airflow.sdk import DAG
from airflow_distributed.operators import DistributedTrainingOperator

HALF_A_CORE = {{"resources": {{"limits": {{"cpu": 0.5}}}}}}
for backend in ("ray", "local"):
    with DAG(dag_id=f"bench_{{backend}}", schedule=None, start_date=pendulum.datetime(2026, 1, 1, tz="UTC")) as dag:
        DistributedTrainingOperator(
            task_id="train", framework="pytorch", backend=backend, python=sys.executable,
            model_dir=os.path.join(os.environ["AIRFLOW_HOME"], "models", backend),
            environment={{"pytorch": {{"n_workers": 2, "default_worker": HALF_A_CORE}}, **HALF_A_CORE}},
            command=["python", {str(SCRIPT)!r}, "--steps", "{{{{ params.steps }}}}"], params={{"steps": 300}},
        )
    globals()[f"bench_{{backend}}"] = dag
'''


def _airflow_env(home: Path) -> None:
    dags = home / "dags"
    dags.mkdir()
    (dags / "bench_ray_vs_local.py").write_text(DAGS)
    os.environ.update({"AIRFLOW_HOME": str(home), "AIRFLOW__CORE__DAGS_FOLDER": str(dags),
                       "AIRFLOW__CORE__LOAD_EXAMPLES": "False", "PYTHONPATH": str(ROOT), **LOOPBACK_ONLY})
    subprocess.run([str(Path(sys.executable).with_name("airflow")), "db", "migrate"], check=True,
                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


def task_seconds(dag_id: str, steps: int) -> float:
    from airflow.dag_processing.dagbag import DagBag

    run = DagBag().get_dag(dag_id).test(run_conf={"steps": steps})
    ti = next(t for t in run.get_task_instances() if t.task_id == "train")
    assert ti.state == "success", (dag_id, ti.state)
    return (ti.end_date - ti.start_date).total_seconds()


def measure(rounds: int = 3, steps: int = 300) -> dict:
    home = Path(tempfile.mkdtemp(prefix="bench-airflow-"))
    ray_times: list[float] = []
    local_times: list[float] = []
    try:
        _airflow_env(home)
        with RayCluster(cpus=4) as cluster:
            os.environ["AIRFLOW_CONN_RAY_DEFAULT"] = cluster.connection()
            for _ in range(rounds):
                ray_times.append(task_seconds("bench_ray", steps))
                local_times.append(task_seconds("bench_local", steps))
    finally:
        shutil.rmtree(home, ignore_errors=True)
    ray, local = statistics.median(ray_times), statistics.median(local_times)
    return {"rounds": rounds, "steps": steps, "replicas": 3, "ray_seconds": ray_times, "local_seconds": local_times,
            "ratio": ray / local, "overhead_seconds": ray - local}


if __name__ == "__main__":
    print(json.dumps(measure(), indent=2))

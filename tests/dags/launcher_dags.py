"""PyTorch jobs started by DeepSpeed's and Accelerate's launchers (``environment.pytorch.launcher``) on the local
backend: 2 replicas x 2 processes, from ``.venvs/launchers`` (``scripts/framework-venv.sh launchers``; ``python=``
points the replicas at it). Each process writes what it saw into ``report_dir`` (the run's conf):
``tests/integration/test_launchers.py`` reads them."""

from __future__ import annotations

from pathlib import Path

import pendulum
from airflow.sdk import DAG

from airflow_distributed.operators import DistributedTrainingOperator

ROOT = Path(__file__).resolve().parents[2]
LAUNCHERS_PYTHON = str(ROOT / ".venvs" / "launchers" / "bin" / "python")
SCRIPTS = ROOT / "tests" / "data" / "launchers"

for launcher, script in (("deepspeed", "deepspeed_zero2.py"), ("accelerate", "accelerate_ddp.py")):
    with DAG(dag_id=f"test_launcher_{launcher}", schedule=None, start_date=pendulum.datetime(2026, 1, 1, tz="UTC"),
             catchup=False, tags=["test"]):
        DistributedTrainingOperator(
            task_id="train",
            framework="pytorch",
            environment={"pytorch": {"n_workers": 1, "n_proc_per_node": 2, "launcher": launcher}},
            command=["python", str(SCRIPTS / script), "--report-dir", "{{ dag_run.conf['report_dir'] }}"],
            python=LAUNCHERS_PYTHON,
        )

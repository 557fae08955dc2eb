"""Importing the operator (every DAG parse does) loads no training framework and no Kubernetes client."""

from __future__ import annotations

import json
import subprocess
import sys

HEAVY = ["torch", "tensorflow", "mxnet", "horovod", "kubernetes", "kubernetes_asyncio", "psutil", "ray", "requests",
         "urllib3", "aiohttp", "openlineage", "kubeflow_trainer_api", "mlflow"]
#: What a DAG file may import from the package: the operator, the decorator, the sensors.
DAG_IMPORTS = ("from airflow_distributed.operators import DistributedTrainingOperator\n"
               "from airflow_distributed.decorators.distributed import distributed_task\n"
               "import airflow_distributed.sensors\n")


def test_operator_import_pulls_in_no_framework_or_kubernetes_client():
    # Only what this import adds counts: the Task SDK is loaded first, as in any DAG file.
    code = (
        "import sys, json, airflow.sdk\n"
        "before = set(sys.modules)\n"
        "from airflow_distributed.operators import DistributedTrainingOperator\n"
        f"print(json.dumps([m for m in {HEAVY!r} if m in sys.modules and m not in before]))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], check=True, capture_output=True, text=True).stdout
    assert json.loads(out.strip().splitlines()[-1]) == []


def test_pure_job_state_loads_no_kubernetes_client():
    code = (
        "import sys, json\n"
        "import airflow_distributed.jobstate.job_watch\n"
        f"print(json.dumps([m for m in {HEAVY!r} if m in sys.modules]))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], check=True, capture_output=True, text=True).stdout
    assert json.loads(out.strip().splitlines()[-1]) == []

#: What lies behind the lazy boundaries besides the hooks and triggers: each backend's run, the sensors' reads.
RUN_TIME = [f"airflow_distributed.backends.{name}_run"
            for name in ("kubernetes", "kubeflow", "trainjob", "ray", "local")]
RUN_TIME += ["airflow_distributed.sensors.job_reads", "airflow_distributed.plugins.app"]


def test_dag_parsing_stops_at_the_lazy_boundaries():
    # Each backend's front (its checks) loads at parse; its run-time module, the hooks and the triggers load only
    # when a job runs or a sensor pokes (tests/unit/test_import_graph.py names every such boundary).
    code = (
        "import sys, json, airflow.sdk\n"
        "before = set(sys.modules)\n"
        f"{DAG_IMPORTS}"
        "added = set(sys.modules) - before\n"
        f"print(json.dumps(sorted(m for m in added if m.split('.')[0] in {HEAVY!r})))\n"
        "print(json.dumps(sorted(m for m in added if m.startswith(('airflow_distributed.hooks',"
        f" 'airflow_distributed.triggers')) or m in {RUN_TIME!r})))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], check=True, capture_output=True, text=True).stdout
    heavy, run_time = (json.loads(line) for line in out.strip().splitlines()[-2:])
    assert heavy == []
    assert run_time == []

"""Importing the operator (every DAG parse does) loads no training framework and no Kubernetes client."""

from __future__ import annotations

import json
import subprocess
import sys

HEAVY = ["torch", "tensorflow", "mxnet", "horovod", "kubernetes", "kubernetes_asyncio", "psutil", "ray"]


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

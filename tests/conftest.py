"""Test set-up: a real Airflow with a SQLite metadata database in a temporary AIRFLOW_HOME.

AIRFLOW_HOME and the DAGs folder must be set before anything imports Airflow, hence at import time here.
The DAGs folder holds links to the example DAGs and to the test DAGs, because ``dag.test()`` runs a DAG
only once its file has been parsed from the DAGs folder.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
EXAMPLE_DAGS = ROOT / "example_dags"
TEST_DAGS = ROOT / "tests" / "dags"

_HOME = Path(tempfile.mkdtemp(prefix="airflow-distributed-tests-"))
_DAGS = _HOME / "dags"
_DAGS.mkdir()
for folder in (EXAMPLE_DAGS, TEST_DAGS):
    for dag_file in folder.glob("*.py"):
        if dag_file.name != "__init__.py":
            (_DAGS / dag_file.name).symlink_to(dag_file)

os.environ["AIRFLOW_HOME"] = str(_HOME)
os.environ["AIRFLOW__CORE__DAGS_FOLDER"] = str(_DAGS)
os.environ["AIRFLOW__CORE__LOAD_EXAMPLES"] = "False"
os.environ["AIRFLOW__CORE__UNIT_TEST_MODE"] = "True"
os.environ.setdefault("AIRFLOW__LOGGING__LOGGING_LEVEL", "INFO")
# The test DAGs import the tests' shared modules (``tests.kube_node.images``, ``tests.mlflow_server``...): an Airflow
# the tests start in a process of its own (``airflow dags test``, the API server) parses them too.
os.environ["PYTHONPATH"] = os.pathsep.join(filter(None, (str(ROOT), os.environ.get("PYTHONPATH"))))


def pytest_sessionfinish(session, exitstatus):
    shutil.rmtree(_HOME, ignore_errors=True)


@pytest.fixture(autouse=True)
def finish_grace(monkeypatch) -> float:
    """No ``finish_grace`` by default (``watch_timings.FINISH_GRACE``; returns the product's): the emulator's and the
    test kubelet's workers never end by themselves after the master, and every succeeded job would wait it out for
    nothing. The real node's tests override this fixture (their workers do end); others set ``finish_grace`` in
    ``watch_timings``."""
    from airflow_distributed.jobstate import watch_timings

    product = watch_timings.FINISH_GRACE
    monkeypatch.setattr(watch_timings, "FINISH_GRACE", 0.0)
    return product


@pytest.fixture(scope="session")
def airflow_home() -> Path:
    return _HOME


@pytest.fixture(scope="session")
def airflow_db(airflow_home: Path) -> Path:
    """``airflow db migrate`` once per session, with the real CLI."""
    airflow = Path(sys.executable).with_name("airflow")
    subprocess.run([str(airflow), "db", "migrate"], check=True, capture_output=True, env=os.environ.copy())
    return airflow_home


@pytest.fixture(scope="module")
def kubeconfig(emulator, tmp_path_factory) -> str:
    """A kubeconfig for the module's ``emulator`` (the integration conftest's, or a module's own)."""
    return emulator.write_kubeconfig(tmp_path_factory.mktemp("kube") / "config")

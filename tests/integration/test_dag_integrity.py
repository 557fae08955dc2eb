"""Every example DAG imports with no errors; the provider is registered with Airflow."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import EXAMPLE_DAGS

EXAMPLES = sorted(p for p in EXAMPLE_DAGS.glob("example_*.py"))


def test_examples_exist():
    assert [p.name for p in EXAMPLES]


@pytest.mark.parametrize("path", EXAMPLES, ids=[p.stem for p in EXAMPLES])
def test_example_dag_imports_cleanly(path: Path):
    from airflow.dag_processing.dagbag import DagBag

    bag = DagBag(dag_folder=str(path))
    assert bag.import_errors == {}
    assert bag.dags, f"{path.name} defines no DAG"
    for dag in bag.dags.values():
        assert dag.tags and "example" in dag.tags


@pytest.mark.usefixtures("airflow_db")
def test_airflow_lists_the_provider():
    airflow = Path(sys.executable).with_name("airflow")
    out = subprocess.run([str(airflow), "providers", "list", "-o", "json"], check=True, capture_output=True,
                         text=True).stdout
    listing = next(line for line in reversed(out.splitlines()) if line.startswith("[{"))
    providers = {p["package_name"]: p for p in json.loads(listing)}
    assert providers["airflow-distributed"]["version"] == "0.1.0"


@pytest.mark.parametrize("example, module", [("example_jax_data_parallel", "jax"), ("example_xgboost_dist", "xgboost"),
                                             ("example_paddle_collective", "paddle"), ("example_paddle_ps", "paddle")])
def test_an_example_parses_without_its_framework_installed(example: str, module: str):
    # None in sys.modules makes any import of the module fail, as on a machine without it.
    code = (f"import sys; sys.modules[{module!r}] = None\n"
            "from airflow.dag_processing.dagbag import DagBag\n"
            f"bag = DagBag(dag_folder={str(EXAMPLE_DAGS / (example + '.py'))!r})\n"
            "assert bag.import_errors == {}, bag.import_errors\n"
            f"assert list(bag.dags) == [{example!r}], list(bag.dags)\n")
    subprocess.run([sys.executable, "-c", code], check=True, capture_output=True, text=True)


BAD_SPEC_DAG = '''
import pendulum
from airflow.sdk import DAG
from airflow_distributed.operators import DistributedTrainingOperator

with DAG("bad_spec", schedule=None, start_date=pendulum.datetime(2026, 1, 1)):
    DistributedTrainingOperator(
        task_id="train", framework="pytorch", command=["python", "train.py"], backend="kubernetes", image="x:1",
        environment={"labels": {"bad key!": "v"}, "resources": {"gpu": {"limits": 0.5}},
                     "pytorch": {"n_workers": 1, "default_worker": {"tolerations": [{"operator": "Equal"}]}}},
    )
'''


def test_a_dag_with_a_spec_kubernetes_would_refuse_does_not_import(tmp_path: Path):
    # Refused when the file is parsed: no task instance, hence no pod and no process, ever exists.
    from airflow.dag_processing.dagbag import DagBag

    (tmp_path / "bad_spec.py").write_text(BAD_SPEC_DAG)
    bag = DagBag(dag_folder=str(tmp_path))
    assert bag.dags == {}
    (error,) = bag.import_errors.values()
    assert "environment.labels: key 'bad key!' is not valid" in error
    assert "environment.resources.gpu.limits: 0.5 is not a whole number" in error
    assert "environment.pytorch.default_worker.tolerations[0].operator: must be 'Exists' when key is empty" in error

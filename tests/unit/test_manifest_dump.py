"""``scripts/dump_manifests.py``: the dump of what each training task would create on each cluster backend covers every
example DAG's training task, holds a non-empty object per backend, and is the same byte for byte when made twice."""

from __future__ import annotations

import importlib.util
import json
import sys
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType

import pytest

from tests.conftest import EXAMPLE_DAGS, ROOT

SCRIPT = ROOT / "scripts" / "dump_manifests.py"


@pytest.fixture(scope="module")
def dumper() -> Iterator[ModuleType]:
    spec = importlib.util.spec_from_file_location("dump_manifests", SCRIPT)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    try:
        spec.loader.exec_module(module)
        yield module
    finally:
        sys.modules.pop(spec.name, None)


@pytest.fixture(scope="module")
def dumps(dumper: ModuleType, tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    first, second = tmp_path_factory.mktemp("first"), tmp_path_factory.mktemp("second")
    dumper.dump(first, [EXAMPLE_DAGS])
    dumper.dump(second, [EXAMPLE_DAGS])
    return first, second


def example_training_tasks() -> set[tuple[str, str]]:
    """The examples' training tasks, found by Airflow's own parse of the folder (not by the script's walk)."""
    from airflow.dag_processing.dagbag import DagBag

    from airflow_distributed.operators.training import DistributedTrainingOperator

    found = set()
    for dag_file in sorted(EXAMPLE_DAGS.glob("*.py")):  # not training/: the replicas' scripts
        bag = DagBag(dag_folder=str(dag_file), safe_mode=False)
        assert not bag.import_errors, bag.import_errors
        found |= {(dag.dag_id, task.task_id) for dag in bag.dags.values() for task in dag.tasks
                  if isinstance(task, DistributedTrainingOperator)}
    return found


def test_covers_every_example_training_task_on_every_backend(dumper: ModuleType, dumps: tuple[Path, Path]) -> None:
    index = json.loads((dumps[0] / dumper.INDEX_FILE).read_text())
    expected = example_training_tasks()
    assert len(expected) >= len(list(EXAMPLE_DAGS.glob("example_*.py")))  # at least one per example file
    assert {(row["dag_id"], row["task_id"]) for row in index} == expected
    assert sorted((row["dag_id"], row["task_id"], row["backend"]) for row in index) == sorted(
        (dag_id, task_id, backend) for dag_id, task_id in expected for backend in dumper.BACKENDS)
    # Every example runs on Kubernetes.
    assert {row["status"] for row in index if row["backend"] == "kubernetes"} == {"objects"}


def test_each_backend_object_is_non_empty_json(dumper: ModuleType, dumps: tuple[Path, Path]) -> None:
    index = json.loads((dumps[0] / dumper.INDEX_FILE).read_text())
    built = {backend: 0 for backend in dumper.BACKENDS}
    for row in index:
        record = json.loads((dumps[0] / row["file"]).read_text())
        assert record["status"] == row["status"]
        assert record["status"] in ("objects", "problems", "skipped"), (row["file"], record)
        if record["status"] == "objects":
            assert record["objects"], row["file"]
            built[row["backend"]] += 1
        elif record["status"] == "problems":
            assert record["problems"], row["file"]
    assert all(built.values()), built
    horovod = json.loads((dumps[0] / "example_horovod" / "train.kubernetes.json").read_text())
    kinds = [obj["kind"] for obj in horovod["objects"]]
    assert kinds[0] == "Service" and "Secret" in kinds and "Pod" in kinds
    assert "PRIVATE KEY" not in json.dumps(horovod)  # generated key material is masked


def test_two_dumps_are_byte_identical(dumper: ModuleType, dumps: tuple[Path, Path]) -> None:
    first, second = dumps
    assert dumper.compare(first, second) == []
    files = sorted(path.relative_to(first) for path in first.rglob("*.json"))
    assert files and all((first / name).read_bytes() == (second / name).read_bytes() for name in files)

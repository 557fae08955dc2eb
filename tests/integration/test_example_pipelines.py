"""The other example DAGs end to end: TensorFlow, MXNet, the retraining pipeline, a mapped sweep."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from tests.conftest import ROOT
from tests.helpers import replica_processes, run_dag, xcom

pytestmark = pytest.mark.usefixtures("airflow_db")
MXNET_PYTHON = ROOT / ".venvs" / "mxnet" / "bin" / "python"


def _assert_trained(run, roles):
    result = xcom(run, "train")
    assert result["state"] == "succeeded"
    assert [(r["role"], r["exit_code"]) for r in result["replicas"]] == [(role, 0) for role in roles]
    metrics = xcom(run, "train", "metrics")
    assert metrics["final_loss"] < metrics["initial_loss"]
    assert os.path.exists(xcom(run, "train", "model_path"))
    assert replica_processes(result["job_name"]) == []
    return metrics


def test_tensorflow_example_trains_with_multiworker_mirrored_strategy():
    pytest.importorskip("tensorflow", reason="tensorflow-cpu is part of the test extra")
    run, states = run_dag("example_tensorflow_multiworker", conf={"steps": 20})
    assert states == {"train": "success", "report": "success"}
    _assert_trained(run, ["chief", "worker", "worker"])


@pytest.mark.skipif(not MXNET_PYTHON.exists(), reason="no MXNet environment: run `make mxnet`")
def test_mxnet_example_trains_with_dist_sync_kvstore():
    run, states = run_dag("example_mxnet_dist_sync", conf={"steps": 20})
    assert states == {"train": "success", "report": "success"}
    _assert_trained(run, ["scheduler", "server", "worker", "worker"])


def test_retraining_pipeline_promotes_only_a_better_model(airflow_home: Path):
    registry = airflow_home / "distributed" / "production" / "example_retraining_pipeline.json"
    registry.unlink(missing_ok=True)

    first, states = run_dag("example_retraining_pipeline", conf={"steps": 40})
    assert states == {"prepare_data": "success", "train": "success", "evaluate": "success", "choose": "success",
                      "promote": "success", "keep_current": "skipped"}
    promoted = json.loads(registry.read_text())
    assert promoted["loss"] == xcom(first, "train", "metrics")["final_loss"]
    assert Path(promoted["model_path"]).is_file()

    # Production now holds a model better than anything a 2-step run can reach: the next run must keep it.
    registry.write_text(json.dumps({**promoted, "loss": promoted["loss"] / 1000}))
    second, states = run_dag("example_retraining_pipeline", conf={"steps": 2})
    assert states["promote"] == "skipped" and states["keep_current"] == "success"
    assert json.loads(registry.read_text())["loss"] == promoted["loss"] / 1000


def test_mapped_sweep_runs_one_job_per_learning_rate():
    run, states = run_dag("test_sweep")
    assert states == {"train": "success"}
    from airflow.models.xcom import XComModel
    from airflow.utils.session import create_session

    with create_session() as session:
        rows = session.execute(
            XComModel.get_many(run_id=run.run_id, dag_ids=run.dag_id, task_ids="train", key="return_value",
                               map_indexes=None)
        ).all()
        results = [XComModel.deserialize_value(row[0]) for row in rows]
    assert len(results) == 2
    assert len({r["job_name"] for r in results}) == 2  # map indexes never share a job
    assert all(r["state"] == "succeeded" for r in results)

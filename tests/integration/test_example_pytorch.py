"""The PyTorch example DAG, end to end through a real Airflow, real processes and real gloo all-reduce."""

from __future__ import annotations

import os

import pytest

from tests.helpers import replica_lines, replica_processes, run_dag, xcom

pytestmark = pytest.mark.usefixtures("airflow_db")


def test_pytorch_example_trains_and_reports_through_xcom(capfd):
    run, states = run_dag("example_pytorch_ddp", conf={"steps": 30})

    assert states == {"train": "success", "report": "success"}
    result = xcom(run, "train")
    assert result["framework"] == "pytorch" and result["backend"] == "local" and result["state"] == "succeeded"
    assert [(r["role"], r["index"], r["exit_code"]) for r in result["replicas"]] == [
        ("master", 0, 0), ("worker", 0, 0), ("worker", 1, 0)
    ]
    metrics = xcom(run, "train", "metrics")
    assert metrics == result["metrics"]
    assert metrics["world_size"] == 3
    assert metrics["final_loss"] < metrics["initial_loss"]
    model_path = xcom(run, "train", "model_path")
    assert os.path.isfile(model_path) and os.path.getsize(model_path) > 0
    assert xcom(run, "report")["model_path"] == model_path
    job = xcom(run, "train", "job")
    assert job["state"] == "succeeded" and job["duration_seconds"] > 0
    assert job["history"] and all("step" in point for point in job["history"])
    assert "logs" not in job  # the replicas' lines are the task log's
    assert set(replica_lines(capfd.readouterr().out, result["job_name"])) == {r["name"] for r in result["replicas"]}
    assert replica_processes(result["job_name"]) == []

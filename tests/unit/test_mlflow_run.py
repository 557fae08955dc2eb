"""What a job sends to MLflow (``mlflow_run``, pure): the run's key across retries and clears, the metric points
of a ``job`` record, the params of the job's shape."""

from __future__ import annotations

from dataclasses import dataclass

import pytest

from airflow_distributed.mlflow_run import (
    TASK_INSTANCE_TAG,
    RunKey,
    ending_tags,
    first_try_since_clear,
    job_params,
    metric_points,
    model_version_of,
    run_status,
    run_url,
)
from airflow_distributed.plan import role_summary
from airflow_distributed.spec import load_spec


@dataclass(frozen=True)
class Tries:
    name: str
    try_number: int
    max_tries: int
    retries: int
    first_try: int


# Airflow sets max_tries = retries when a run is created, and try_number + retries when a task is cleared.
@pytest.mark.parametrize("case", [
    Tries("first try", 1, 2, 2, 1),
    Tries("retry 1", 2, 2, 2, 1),
    Tries("retry 2", 3, 2, 2, 1),
    Tries("cleared after try 3", 4, 3 + 2, 2, 4),
    Tries("its retry", 5, 5, 2, 4),
    Tries("no retries, cleared after try 1", 2, 1, 0, 2),
    Tries("retries raised since (never past the try)", 1, 0, 3, 1),
], ids=lambda case: case.name)
def test_the_first_try_since_a_clear(case):
    assert first_try_since_clear(case.try_number, case.max_tries, case.retries) == case.first_try


def test_a_retry_finds_the_run_and_a_clear_does_not():
    first = RunKey("d", "t", "manual__1", -1, 1)
    assert RunKey("d", "t", "manual__1", -1, 1).digest == first.digest
    assert RunKey("d", "t", "manual__1", -1, 4).digest != first.digest
    assert RunKey("d", "t", "manual__1", 0, 1).digest != first.digest
    # Whatever a run id holds, the filter holds hex only.
    tricky = RunKey("d", "t", "manual__it's `odd`", -1, 1)
    assert tricky.search_filter() == f"tags.`{TASK_INSTANCE_TAG}` = '{tricky.digest}'"
    assert all(char in "0123456789abcdef" for char in tricky.digest)


def test_metric_points_of_a_job_record():
    record = {
        "state": "succeeded", "model_path": "/m/model.pt", "duration_seconds": 12.5, "restarts": 0,
        "metrics": {"loss": 0.2, "final_loss": 0.2, "world_size": 3, "note": "text", "nan": None, "ok": True},
        "history": [{"step": 10, "loss": 0.9, "lr": 0.1}, {"step": 20, "loss": 0.2}, {"loss": 5.0},
                    {"step": -1, "loss": 7.0}],
        "usage": {"wall_seconds": 10.0, "tries": 2, "cpu_seconds": 30.0, "replicas": {"x": {}}},
    }
    assert metric_points(record, try_number=2) == [
        ("loss", 0.9, 10), ("lr", 0.1, 10), ("loss", 0.2, 20),
        ("final_loss", 0.2, 20), ("world_size", 3.0, 20),
        ("airflow.duration_seconds", 12.5, 2), ("airflow.restarts", 0.0, 2),
        ("usage.wall_seconds", 10.0, 2), ("usage.tries", 2.0, 2), ("usage.cpu_seconds", 30.0, 2),
    ]
    assert ending_tags(record) == {"airflow_distributed.state": "succeeded",
                                   "airflow_distributed.model_path": "/m/model.pt"}
    assert metric_points({}, try_number=1) == []


def test_job_params_name_the_shape_and_the_chosen_dag_params():
    spec = load_spec("pytorch", {
        "resources": {"cpu": {"requests": 1, "limits": 2}},
        "pytorch": {"n_workers": 3, "default_worker": {"resources": {"cpu": {"requests": 1, "limits": 1}}},
                    "worker": [{"index": 2, "resources": {"gpu": {"requests": 1, "limits": 1}}}]},
    })
    params = job_params(framework="pytorch", backend="local", roles=role_summary(spec), processes_per_replica=None,
                        dag_params={"steps": 100, "lr": "0.1", "secret": "x"}, chosen=["steps", "lr", "absent"])
    assert params == {
        "framework": "pytorch", "backend": "local", "replicas": "4", "replicas.master": "1", "replicas.worker": "3",
        "resources.master": '{"cpu": {"limits": 2, "requests": 1}}',
        "resources.worker.0": '{"cpu": {"limits": 1, "requests": 1}}',
        "resources.worker.1": '{"gpu": {"limits": 1, "requests": 1}}',
        "param.steps": "100", "param.lr": "0.1",
    }


def test_run_url():
    assert run_url("http://127.0.0.1:5000/", "3", "abc") == "http://127.0.0.1:5000/#/experiments/3/runs/abc"


def test_the_run_ends_as_the_try_ended_and_killed_whatever_the_record_says():
    assert (run_status(True), run_status(False)) == ("FINISHED", "FAILED")
    assert run_status(False, killed=True) == run_status(True, killed=True) == "KILLED"


@pytest.mark.parametrize(("tag", "model", "version"), [
    ("regression/3", "regression", 3),
    ("team/regression/12", "team/regression", 12),  # a name may hold a slash: the version is after the last
    ("other/3", "regression", None),  # another model's: not linked as the DAG's
    ("regression/3", None, None),
    ("regression/x", "regression", None),
    ("regression/\u0663", "regression", None),  # a digit, but not an ASCII one
    (None, "regression", None),
])
def test_the_model_version_a_run_tag_gives(tag, model, version):
    assert model_version_of(tag, model) == version

"""What downstream tasks receive when the master reports less than everything (local backend, real DAG runs).

The Kubernetes backend's and the sensors' versions of these runs are in ``test_kubernetes_backend.py`` and
``test_sensors.py``.
"""

from __future__ import annotations

import pytest

from airflow_distributed.plugins.job_state import TaskInstanceRef
from airflow_distributed.plugins.page import job_page
from tests.helpers import run_dag, xcom

pytestmark = pytest.mark.usefixtures("airflow_db")


def test_a_master_with_metrics_and_no_model_path_hands_none_downstream():
    run, states = run_dag("local_metrics_only")

    assert states == {"train": "success", "evaluate": "success"}
    assert xcom(run, "evaluate") == {"metrics": {"loss": 0.5, "accuracy": 0.9}, "model_path": None}
    assert xcom(run, "train")["model_path"] is None


def test_a_master_that_reports_nothing_hands_empty_metrics_and_none_downstream():
    run, states = run_dag("local_no_output")

    assert states == {"train": "success", "evaluate": "success"}
    assert xcom(run, "evaluate") == {"metrics": {}, "model_path": None}


def test_a_master_whose_report_is_not_strict_json_succeeds_with_nulls_everywhere_it_goes(capfd):
    """NaN, infinities, 1e999, a percent as a string, a nested metric and a stray history point, written by hand:
    the job still succeeds at its first try, and every XCom, the asset event and the job view hold strict JSON."""
    run, states = run_dag("local_bad_report")

    assert states == {"train": "success", "evaluate": "success"}
    assert [ti.try_number for ti in run.get_task_instances() if ti.task_id == "train"] == [1]  # not retried
    metrics = {"loss": None, "accuracy": 0.9, "best": None, "huge": None,
               "nested": {"a": {"b": {"c": {"d": {"e": None, "f": 1.5}}}}}}
    assert xcom(run, "evaluate") == {"metrics": metrics, "model_path": "/models/bad-report"}
    assert xcom(run, "train")["metrics"] == metrics and xcom(run, "train", "metrics") == metrics
    record = xcom(run, "train", "job")
    assert record["state"] == "succeeded"
    assert record["history"] == [{"step": 1, "loss": None}, {"step": 2, "loss": None}, {"step": 3, "loss": 0.5}]
    assert record["progress"] == {"step": 5, "total": 10, "percent": None, "eta_seconds": None}
    live = xcom(run, "train", "job_live")
    # Published at the first poll, and again once the master's document is there (it waits past the interval).
    assert live["state"] == "running" and live["metrics"] in (metrics, {})
    (extra,) = _asset_extras("file:///models/local_bad_report/train")
    assert extra["metrics"] == metrics and extra["model_path"] == "/models/bad-report"
    page = job_page(record, TaskInstanceRef(dag_id=run.dag_id, run_id=run.run_id, task_id="train"), source="recorded",
                    show_logs=True, json_href="x")
    assert "/models/bad-report" in page and "accuracy" in page and "Progress" not in page  # no percent, no bar
    out = capfd.readouterr().out
    assert "the master's output document was sanitised: " in out and "progress.percent" in out


def test_a_master_whose_report_is_not_json_at_all_succeeds_with_a_warning_and_no_metrics(capfd):
    run, states = run_dag("local_not_json_report")

    assert states == {"train": "success", "evaluate": "success"}
    assert xcom(run, "evaluate") == {"metrics": {}, "model_path": None}
    (warning,) = [line for line in capfd.readouterr().out.splitlines() if "output document could not be read" in line]
    assert "so no metrics were taken from it: it is not JSON (Expecting value at line 1 column 1)" in warning
    assert "garbage" not in warning  # the text itself is not echoed: it may hold a secret


def _asset_extras(uri: str) -> list:
    from airflow.models.asset import AssetEvent, AssetModel
    from airflow.utils.session import create_session
    from sqlalchemy import select

    with create_session() as session:
        return list(session.execute(
            select(AssetEvent.extra).join(AssetModel, AssetEvent.asset_id == AssetModel.id)
            .where(AssetModel.uri == uri)).scalars())

"""A running local job as its watchers see it: progress in the task log, a live record in the job view."""

from __future__ import annotations

import threading

import pytest

from airflow_distributed.plugins.job_state import DEFAULT_SOURCES, TaskInstanceRef, read_job
from airflow_distributed.plugins.page import job_page
from tests.dags.progress_dags import STEPS
from tests.helpers import replica_processes, run_dag, xcom

pytestmark = pytest.mark.usefixtures("airflow_db")


def test_a_running_local_job_shows_its_replicas_metrics_and_progress_before_it_ends(capfd):
    from airflow.utils.session import create_session

    seen: list[tuple[dict, str]] = []
    done = threading.Event()

    def watch() -> None:
        """What the job view reads, every half second, from the metadata database (as the API server does)."""
        from airflow.models.dagrun import DagRun

        while not done.wait(0.5):
            with create_session() as session:
                runs = session.query(DagRun).filter(DagRun.dag_id == "test_local_progress").all()
                for run in runs:
                    found = read_job(TaskInstanceRef(dag_id=run.dag_id, run_id=run.run_id, task_id="train"), session,
                                     DEFAULT_SOURCES)
                    if found is not None:
                        seen.append(found)

    watcher = threading.Thread(target=watch, daemon=True)
    watcher.start()
    try:
        run, states = run_dag("test_local_progress")
    finally:
        done.set()
        watcher.join(10)

    assert states == {"train": "success"}
    live = [(record, source) for record, source in seen if source == "live"]
    assert live, "the job view never saw the job running"
    midway = [record for record, _ in live if 0 < (record.get("progress") or {}).get("percent", 0) < 100]
    assert midway, [record.get("progress") for record, _ in live]
    record = midway[-1]
    assert record["state"] == "running" and record["backend"] == "local"
    assert {r["state"] for r in record["replicas"]} == {"running"}
    assert record["progress"]["total"] == STEPS
    assert record["history"] and "logs" not in record  # metrics so far, before the end; lines are the task log's
    page = job_page(record, TaskInstanceRef(dag_id="d", run_id="r", task_id="train"), source="live", show_logs=True,
                    json_href="x")
    assert "Progress" in page and f"/{STEPS} steps)" in page and 'http-equiv="refresh"' in page
    # The final record then replaces it, and stays.
    final, source = read_job(TaskInstanceRef(dag_id=run.dag_id, run_id=run.run_id, task_id="train"), _session(),
                             DEFAULT_SOURCES)
    assert source == "recorded" and final["state"] == "succeeded" and final["progress"]["percent"] == 100
    out = capfd.readouterr().out
    assert f"progress of {xcom(run, 'train', 'job_name')}: " in out and "% (" in out and "left" in out
    assert replica_processes(xcom(run, "train", "job_name")) == []


def _session():
    from airflow.utils.session import create_session

    with create_session() as session:
        return session

"""A replica's output only behind the permission to read task logs: no XCom holds a replica's line, through any
endpoint of Airflow's REST API, while the job runs or after; the job view shows the lines, read from the task log,
to a viewer who may read it, and says it may not to one who may not.

Airflow's own API server app (``tests.api_server``) with real JWTs, an auth manager whose ``reader`` may read the
DAG's XComs but not its task logs and whose ``logreader`` may read both (``tests.auth_manager``); the task runs
under Airflow's supervisor, which writes its task log file (``tests.supervised_runs``), and trains for real.
"""

from __future__ import annotations

import json
import threading

import pytest

from tests.api_server import api_client, as_user, task_reads
from tests.helpers import run_dag, xcom
from tests.supervised_runs import supervised_tasks

pytestmark = pytest.mark.usefixtures("airflow_db")

DAG_ID, TASK_ID, TEAM = "test_local_progress", "train", "ml"
USERS = {"reader": f"viewer:{TEAM}", "logreader": f"viewer:{TEAM}"}
#: What every replica of the job prints once joined (pytorch_ddp.py): a replica's line, never an XCom's.
REPLICA_LINE = "process group ready"


@pytest.fixture(scope="module")
def client(tmp_path_factory):
    with api_client(USERS, TEAM, (TEAM,), tmp_path_factory.mktemp("auth"), no_log_users=("reader",)) as test_client:
        yield test_client


def test_a_replicas_lines_reach_only_a_viewer_who_may_read_the_task_log_during_the_run_and_after(client):
    from airflow.models.dagrun import DagRun
    from airflow.utils.session import create_session

    headers = {user: as_user(client, user) for user in USERS}
    during: list[tuple[str, dict[str, str]]] = []
    done = threading.Event()

    def watch() -> None:
        """What each user reads, every half second, while the task runs."""
        while not done.wait(0.5):
            with create_session() as session:
                runs = [run.run_id for run in session.query(DagRun).filter(DagRun.dag_id == DAG_ID)]
            for run_id in runs:
                for user in USERS:
                    during.append((user, task_reads(client, DAG_ID, run_id, TASK_ID, headers[user])))

    watcher = threading.Thread(target=watch, daemon=True)
    watcher.start()
    try:
        with supervised_tasks():
            run, states = run_dag(DAG_ID, conf={"steps": 240})
    finally:
        done.set()
        watcher.join(30)

    assert states == {TASK_ID: "success"}
    job = xcom(run, TASK_ID, "job_name")
    # While it ran: the job view showed the running job, and its lines to the log reader only.
    running = [(user, texts) for user, texts in during if '"state":"running"' in texts["view json"]]
    assert {user for user, _ in running} == set(USERS), "the view never showed the job running"
    for user, texts in during:
        leaked = [where for where, text in texts.items()
                  if REPLICA_LINE in text and not (user == "logreader" and where.startswith("view"))]
        assert leaked == [], (user, leaked)
    assert any(REPLICA_LINE in texts["view json"] for user, texts in running if user == "logreader")
    assert all(json.loads(texts["view json"])["logs"] is None for user, texts in running if user == "reader")

    # After it: the XComs hold no line for anyone; the view shows the task log's closing block to the log reader.
    after = {user: task_reads(client, DAG_ID, run.run_id, TASK_ID, headers[user]) for user in USERS}
    for texts in after.values():
        assert {"xcomEntries/job?deserialize=true", "xcomEntries/job_live?deserialize=true"} <= set(texts)
        assert [where for where, text in texts.items() if REPLICA_LINE in text and not where.startswith("view")] == []
    record = json.loads(after["logreader"]["view json"])
    assert record["source"] == "recorded" and set(record["logs"]) == {f"{job}-master-0", f"{job}-worker-0",
                                                                      f"{job}-worker-1"}
    for rank, name in enumerate(sorted(record["logs"], key=lambda n: (not n.endswith("master-0"), n))):
        assert any(f"rank {rank}/3: {REPLICA_LINE}" in line for line in record["logs"][name]), record["logs"][name]
    assert f"rank 0/3: {REPLICA_LINE}" in after["logreader"]["view html"]
    refused = json.loads(after["reader"]["view json"])
    assert refused["logs"] is None and refused["metrics"] == record["metrics"]
    assert "No permission to read logs" in after["reader"]["view html"]

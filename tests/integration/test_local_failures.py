"""Failure paths of the local backend through a real Airflow: nothing is left running afterwards."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import textwrap
import time

import pytest

from tests.conftest import ROOT
from tests.helpers import replica_processes, run_dag, wait_until, xcom

pytestmark = pytest.mark.usefixtures("airflow_db")


@pytest.mark.parametrize(
    ("dag_id", "crashed"),
    [("test_worker_crash", "worker-1"), ("test_master_crash", "master-0")],
)
def test_a_crashing_replica_fails_the_task_naming_it(dag_id, crashed, capfd):
    run, states = run_dag(dag_id)

    assert states == {"train": "failed"}
    out = capfd.readouterr().out
    failure = next(line for line in out.splitlines() if re.search(r"failed after \d+\.\ds: replica", line))
    assert f"-{crashed} exited with code 3" in failure
    assert "every other replica was stopped" in failure
    assert xcom(run, "train") is None
    job = xcom(run, "train", "job")
    assert job["state"] == "failed"
    assert {r["name"].split("-", 2)[-1]: r["exit_code"] for r in job["replicas"]}[crashed] == 3
    assert replica_processes("train-") == []


def test_execution_timeout_stops_every_replica(capfd):
    started = time.monotonic()
    run, states = run_dag("test_timeout")
    assert states == {"train": "failed"}
    assert time.monotonic() - started < 90
    assert "AirflowTaskTimeout" in capfd.readouterr().out
    assert replica_processes("train-") == []


def _start_long_job() -> tuple[subprocess.Popen, list]:
    """The long DAG in a separate process, as a task process; returns once its replicas are running."""
    code = textwrap.dedent(
        """
        from tests.helpers import run_dag
        run_dag("test_long_running")
        """
    )
    proc = subprocess.Popen([sys.executable, "-c", code], cwd=ROOT, env=os.environ.copy(),
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    replicas = wait_until(lambda: len(replica_processes("train-")) == 3 and replica_processes("train-"), timeout=120)
    return proc, replicas


def test_sigterm_to_the_task_process_runs_on_kill_and_stops_every_replica():
    # What Airflow does when a task is marked failed or killed from the UI: SIGTERM to the task process,
    # whose handler calls the operator's on_kill().
    proc, replicas = _start_long_job()
    proc.send_signal(signal.SIGTERM)
    wait_until(lambda: replica_processes("train-") == [], timeout=30)
    proc.wait(timeout=60)
    assert all(not r.is_running() for r in replicas)


def test_sigkill_of_the_task_process_still_takes_the_replicas_down():
    # No handler runs on SIGKILL; the replicas die with their parent (PR_SET_PDEATHSIG).
    proc, replicas = _start_long_job()
    proc.kill()
    proc.wait(timeout=30)
    wait_until(lambda: replica_processes("train-") == [], timeout=30)


def test_paddle_ps_job_succeeds_when_the_master_ends_and_its_pservers_are_stopped():
    # Pservers never exit by themselves: the master (trainer 0) decides, the backend stops the rest.
    run, states = run_dag("test_paddle_ps_stand_in")

    assert states == {"train": "success"}
    assert xcom(run, "train", "metrics") == {"trainer_id": 0, "trainers": 2, "pservers_reached": 2}
    job = xcom(run, "train")
    assert sorted((r["role"], r["index"]) for r in job["replicas"]) == [
        ("master", 0), ("pserver", 0), ("pserver", 1), ("worker", 0)]
    assert replica_processes("train-") == []


def test_a_commands_rendered_arguments_stay_out_of_the_log_and_its_work_folder_goes_with_it(capfd):
    token = "s3cr3t-token-0815"
    run, states = run_dag("test_secret_argument", conf={"token": token})

    assert states == {"train": "success"}
    metrics = xcom(run, "train", "metrics")
    assert metrics == {"token_length": len(token), "work_mode": "0o700"}
    out = capfd.readouterr().out
    job_name = xcom(run, "train", "job_name")
    assert f"starting {job_name}-master-0: {sys.executable} with 4 arguments" in out
    assert token not in out
    work_dir = re.search(r"work folder (\S+)", out).group(1)
    assert not os.path.exists(work_dir)

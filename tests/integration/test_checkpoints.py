"""Checkpoints that survive tries: a job that failed at a known step is retried by Airflow and resumes there."""

from __future__ import annotations

import os
import re

import pytest

from tests.dags.checkpoint_dags import CRASH_AT, EVERY, STEPS
from tests.helpers import replica_processes, run_dag, xcom

pytestmark = pytest.mark.usefixtures("airflow_db")


def _checkpoint_dir(airflow_home, dag_id: str, job_name: str) -> str:
    return os.path.join(airflow_home, "distributed", "checkpoints", dag_id, job_name)


def test_a_retry_resumes_from_the_last_checkpoint_of_the_failed_try(airflow_home, capfd):
    run, states = run_dag("test_checkpoint_resume")
    out = capfd.readouterr().out

    assert states == {"train": "success"}
    # The first try died at step 45 (code 3); the second started from the checkpoint of step 40, not step 0.
    assert re.search(r"-worker-1 exited with code 3", out)
    last_saved = (CRASH_AT // EVERY) * EVERY
    assert f"resuming from the checkpoint of step {last_saved} (try 2)" in out
    metrics = xcom(run, "train", "metrics")
    assert metrics["resumed_from_step"] == last_saved
    assert metrics["steps"] == STEPS and metrics["parameters_identical"] is True
    assert metrics["final_loss"] < metrics["initial_loss"]
    # The second try trained only the remaining steps: its history starts after the checkpoint.
    history_steps = [point["step"] for point in xcom(run, "train", "job")["history"]]
    assert history_steps and min(history_steps) > last_saved
    # Succeeded with keep_checkpoints=False: the checkpoint files are gone.
    job_name = xcom(run, "train", "job_name")
    assert not os.path.exists(_checkpoint_dir(airflow_home, "test_checkpoint_resume", job_name))
    assert replica_processes(job_name) == []


def test_a_job_that_keeps_its_checkpoints_keeps_the_newest_three(airflow_home):
    run, states = run_dag("test_checkpoint_reference")

    assert states == {"train": "success"}
    metrics = xcom(run, "train", "metrics")
    assert metrics["resumed_from_step"] == 0
    job_name = xcom(run, "train", "job_name")
    folder = _checkpoint_dir(airflow_home, "test_checkpoint_reference", job_name)
    # Beside them, the list of what the job wrote there, for a later clean-up of exactly those.
    assert sorted(os.listdir(folder)) == [f".airflow-distributed-{job_name}.checkpoints",
                                          *(f"checkpoint-{step:012d}.pkl" for step in (40, 50, 60))]


def _another_jobs_files(root) -> list[str]:
    """Checkpoints of another job in a shared directory: 4 files in 6 folders (three of them empty), one of them
    the folder this job's master saves its own checkpoints in (``every_replica``)."""
    made = []
    for relative in ("checkpoint-000000000007.pkl", "master-0/checkpoint-000000000009.pkl",
                     "other/checkpoint-000000000001.pkl", "other/worker-0/checkpoint-000000000003.pkl"):
        path = root / relative
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(b"not this job's")
        made.append(relative)
    (root / "empty-a").mkdir()
    (root / "empty-b" / "inner").mkdir(parents=True)
    return made


def _tree(root) -> set[str]:
    return {str(path.relative_to(root)) for path in root.rglob("*")}


def test_a_job_that_saved_no_checkpoint_removes_nothing_of_a_shared_directory(tmp_path):
    shared = tmp_path / "shared"
    _another_jobs_files(shared)
    before = _tree(shared)

    run, states = run_dag("test_checkpoint_shared_none", conf={"checkpoint_dir": str(shared)})

    assert states == {"train": "success"}
    assert _tree(shared) == before


def test_a_job_removes_exactly_the_checkpoints_and_folders_it_wrote(tmp_path):
    shared = tmp_path / "shared"
    _another_jobs_files(shared)
    before = _tree(shared)

    run, states = run_dag("test_checkpoint_shared_some", conf={"checkpoint_dir": str(shared)})

    assert states == {"train": "success"}
    assert xcom(run, "train", "metrics") == {"saved": 3}
    # Its files and the folder it created (worker-0) are gone; the other job's files and folders (master-0, which
    # this job only wrote in) are all there.
    assert _tree(shared) == before

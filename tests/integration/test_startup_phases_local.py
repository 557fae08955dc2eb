"""A local job's startup phases, end to end: a real Airflow runs the PyTorch example (real processes, gloo)."""

from __future__ import annotations

import pytest

from tests.helpers import run_dag, xcom

pytestmark = pytest.mark.usefixtures("airflow_db")


def test_a_local_jobs_startup_phases_are_ordered_and_within_the_tasks_run(capfd):
    run, states = run_dag("example_pytorch_ddp", conf={"steps": 30})

    assert states["train"] == "success"
    task = next(ti for ti in run.get_task_instances() if ti.task_id == "train")
    job = xcom(run, "train", "job")
    startup = job["startup"]
    names = {replica["name"] for replica in job["replicas"]}
    assert set(startup["replicas"]) == names
    # no queue, no scheduler, no image on the local backend: unknown, never made up
    assert set(startup["unknown"]) == {"admitted", "scheduled", "image_pulled"}
    for row in [startup["job"], *startup["replicas"].values()]:
        assert (row["admitted"], row["scheduled"], row["image_pulled"]) == (None, None, None)
        assert 0.0 == row["created"] <= row["running"] <= row["rendezvous"] <= job["duration_seconds"]
    # the master reports progress (tracking.log_progress): that is the job's rendezvous
    master = job["replicas"][0]["name"]
    assert (startup["rendezvous_by"], startup["slowest"]["rendezvous"]) == ("progress", master)
    assert startup["job"]["rendezvous"] == startup["replicas"][master]["rendezvous"]
    assert startup["job"]["running"] == max(row["running"] for row in startup["replicas"].values())
    # the job was created within the task's run
    from airflow_distributed.jobstate.startup import epoch

    created = epoch(startup["created_at"])
    assert task.start_date.timestamp() <= created
    assert created + startup["job"]["rendezvous"] <= task.end_date.timestamp()
    # said once in the task log, as the job began to train
    out = capfd.readouterr().out
    assert out.count(f"startup of {job['job_name']}: ") == 1
    assert f"rendezvous {startup['job']['rendezvous']:.1f}s (first progress, slowest {master})" in out

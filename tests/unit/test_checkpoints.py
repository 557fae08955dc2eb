"""Checkpoint variables of the contract and ``tracking``'s checkpoint helpers (standard library only)."""

from __future__ import annotations

import json
import os
import pickle

import pytest

from airflow_distributed import contract, tracking
from airflow_distributed.manifests.kubernetes import POD_LAUNCH, layout_for_kubernetes
from airflow_distributed.manifests.local import LOCAL_LAUNCH
from airflow_distributed.plan import KubernetesAddressing, Layout, LocalAddressing, build_plan
from airflow_distributed.replica import checkpoints
from airflow_distributed.spec import load_spec

SPEC = load_spec("pytorch", {"pytorch": {"n_workers": 2}})


def test_every_replica_gets_the_same_checkpoint_dir_and_the_try_number():
    layout = Layout(model_dir="/m", output_path="/o.json", files_dir="/f", checkpoint_dir="/c/job")
    plan = build_plan(SPEC, "job", LocalAddressing(ports=[1, 2, 3]), layout, ["x"],
                      backend="local", launch=LOCAL_LAUNCH, try_number=3)
    assert {r.env["AIRFLOW_DISTRIBUTED_CHECKPOINT_DIR"] for r in plan.replicas} == {"/c/job"}
    assert {r.env["AIRFLOW_DISTRIBUTED_TRY_NUMBER"] for r in plan.replicas} == {"3"}


def test_no_checkpoint_dir_no_variable_and_the_first_try_by_default():
    layout = Layout(model_dir="/m", output_path="/o.json", files_dir="/f")
    plan = build_plan(SPEC, "job", LocalAddressing(ports=[1, 2, 3]), layout, ["x"],
                      backend="local", launch=LOCAL_LAUNCH)
    assert "AIRFLOW_DISTRIBUTED_CHECKPOINT_DIR" not in plan.master.env
    assert plan.master.env["AIRFLOW_DISTRIBUTED_TRY_NUMBER"] == "1"


@pytest.mark.parametrize(("model_dir", "checkpoint_dir", "expected"), [
    (None, None, "/airflow-distributed/model/checkpoints/job-1"),
    ("/mnt/models", None, "/mnt/models/checkpoints/job-1"),
    ("s3://bucket/models", None, "s3://bucket/models/checkpoints/job-1"),
    ("/mnt/models", "/mnt/ckpt/x", "/mnt/ckpt/x"),
])
def test_kubernetes_checkpoint_dir_is_per_task_instance_under_the_model_dir(model_dir, checkpoint_dir, expected):
    layout = layout_for_kubernetes(model_dir, job_name="job-1", checkpoint_dir=checkpoint_dir)
    plan = build_plan(SPEC, "job-1", KubernetesAddressing("ns"), layout, ["x"], backend="kubernetes", launch=POD_LAUNCH)
    assert plan.replica("job-1-worker-1").env["AIRFLOW_DISTRIBUTED_CHECKPOINT_DIR"] == expected


def test_save_then_latest_returns_the_newest_and_keeps_only_the_last_n(master):
    assert tracking.latest_checkpoint() is None
    for step in (10, 20, 30, 40):
        tracking.save_checkpoint({"w": [step, step]}, step, keep=2)
    assert tracking.latest_checkpoint() == (40, {"w": [40, 40]})
    assert sorted(os.listdir(master.checkpoints)) == ["checkpoint-000000000030.pkl", "checkpoint-000000000040.pkl"]


def test_a_damaged_newest_checkpoint_falls_back_to_the_one_before(master):
    tracking.save_checkpoint("good", 5)
    (master.checkpoints / "checkpoint-000000000006.pkl").write_bytes(pickle.dumps({"step": 6})[:5])
    assert tracking.latest_checkpoint() == (5, "good")


def test_only_the_master_saves_unless_every_replica_is_asked(master, monkeypatch):
    monkeypatch.setenv("RANK", "1")  # a launcher's rank other than 0: not the master
    assert tracking.save_checkpoint("w", 1) is None
    path = tracking.save_checkpoint("mine", 1, every_replica=True)
    assert path == str(master.checkpoints / "master-0" / "checkpoint-000000000001.pkl")
    assert tracking.latest_checkpoint(every_replica=True) == (1, "mine")
    assert tracking.latest_checkpoint() is None


def test_outside_a_job_or_with_a_url_nothing_is_saved(monkeypatch, master):
    monkeypatch.setenv(contract.ENV_CHECKPOINT_DIR, "s3://bucket/ckpt")
    assert tracking.get_checkpoint_dir() == "s3://bucket/ckpt"
    assert tracking.save_checkpoint("w", 1) is None and tracking.latest_checkpoint() is None
    monkeypatch.delenv(contract.ENV_CHECKPOINT_DIR)
    assert tracking.save_checkpoint("w", 1) is None and tracking.get_try_number() == 1


@pytest.mark.parametrize(("step", "keep"), [(-1, 3), (1.5, 3), (True, 3), (1, 0)])
def test_bad_arguments_are_refused(master, step, keep):
    with pytest.raises(ValueError, match=r"step|keep"):
        tracking.save_checkpoint("w", step, keep=keep)


def test_a_restarted_elastic_worker_group_carries_on_the_masters_history(master, monkeypatch):
    output = master.output
    monkeypatch.setenv("RANK", "0")
    tracking.log_metrics(step=10, loss=0.5)
    # A new process of the same try (the agent restarted the group): the state of the old one is gone.
    tracking._new_process()
    monkeypatch.setenv("TORCHELASTIC_RUN_ID", "job-1")
    tracking.log_metrics(step=20, loss=0.25)
    assert [point["step"] for point in json.loads(output.read_text())["history"]] == [10, 20]
    # Outside the agent a new process starts a new document, as before.
    tracking._new_process()
    monkeypatch.delenv("TORCHELASTIC_RUN_ID")
    tracking.log_metrics(step=30, loss=0.125)
    assert [point["step"] for point in json.loads(output.read_text())["history"]] == [30]


def test_in_a_shared_directory_a_job_reads_and_prunes_only_its_own_checkpoints(master, monkeypatch):
    monkeypatch.setenv(contract.ENV_JOB, "job-a")
    master.checkpoints.mkdir()
    theirs = master.checkpoints / "checkpoint-000000000099.pkl"
    theirs.write_bytes(pickle.dumps({"step": 99, "state": "another job's"}))
    assert tracking.latest_checkpoint() is None  # never resume from another job's state
    for step in (1, 2, 3):
        tracking.save_checkpoint(step, step, keep=2)
    assert tracking.latest_checkpoint() == (3, 3)
    assert theirs.exists()
    assert checkpoints.written_checkpoints(str(master.checkpoints), "job-a") == (
        ["checkpoint-000000000001.pkl", "checkpoint-000000000002.pkl", "checkpoint-000000000003.pkl"], [])


def test_the_clean_up_removes_no_file_the_list_names_outside_its_directory(tmp_path):
    from airflow_distributed.hooks.local import LocalProcessHook

    outside = tmp_path / "outside" / "checkpoint-000000000001.pkl"
    outside.parent.mkdir()
    outside.write_bytes(b"x")
    folder = tmp_path / "ckpt"
    folder.mkdir()
    (folder / "notes.txt").write_text("not a checkpoint")
    (folder / ".airflow-distributed-job-a.checkpoints").write_text(
        f"../outside/checkpoint-000000000001.pkl\n{outside}\nnotes.txt\n../outside/\n")
    assert LocalProcessHook.remove_checkpoints(str(folder), "job-a") == 0
    assert outside.exists() and (folder / "notes.txt").exists()
    assert sorted(os.listdir(folder)) == ["notes.txt"]

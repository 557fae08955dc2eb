"""``AIRFLOW_DISTRIBUTED_TENSORBOARD_DIR``: every replica of a job gets the same folder for its TensorBoard events, the
same for every try of the task instance (per job), on the model storage on clusters."""

from __future__ import annotations

import os

import pytest
from airflow.sdk import DAG

from airflow_distributed import contract
from airflow_distributed.backends.base import BackendSettings, ProcessSettings
from airflow_distributed.backends.local_run import local_dirs
from airflow_distributed.manifests.kubernetes import POD_LAUNCH, layout_for_kubernetes
from airflow_distributed.manifests.local import LOCAL_LAUNCH
from airflow_distributed.manifests.ray import job_layout
from airflow_distributed.operators import DistributedTrainingOperator
from airflow_distributed.plan import KubernetesAddressing, Layout, LocalAddressing, build_plan
from airflow_distributed.spec import load_spec

SPEC = load_spec("pytorch", {"pytorch": {"n_workers": 2}})


def test_the_contract_names_it():
    assert contract.ENV_TENSORBOARD_DIR == "AIRFLOW_DISTRIBUTED_TENSORBOARD_DIR"


@pytest.mark.parametrize("try_number", [1, 2])
def test_every_replica_of_every_try_gets_the_same_folder(try_number):
    layout = Layout(model_dir="/m", output_path="/o.json", files_dir="/f", tensorboard_dir="/tb/job")
    plan = build_plan(SPEC, "job", LocalAddressing(ports=[1, 2, 3]), layout, ["x"],
                      backend="local", launch=LOCAL_LAUNCH,
                      try_number=try_number)
    assert [r.env[contract.ENV_TENSORBOARD_DIR] for r in plan.replicas] == ["/tb/job"] * 3


@pytest.mark.parametrize(("model_dir", "expected"), [
    (None, "/airflow-distributed/model/tensorboard/job-1"),
    ("/mnt/models", "/mnt/models/tensorboard/job-1"),
    ("s3://bucket/models", "s3://bucket/models/tensorboard/job-1"),
])
def test_on_kubernetes_it_is_per_job_on_the_model_storage(model_dir, expected):
    layout = layout_for_kubernetes(model_dir, job_name="job-1")
    plan = build_plan(SPEC, "job-1", KubernetesAddressing("ns"), layout, ["x"], backend="kubernetes", launch=POD_LAUNCH)
    assert {r.env[contract.ENV_TENSORBOARD_DIR] for r in plan.replicas} == {expected}


def test_on_ray_it_is_under_the_model_folder():
    assert job_layout("/w", "job", "/shared/m", "/shared/c").tensorboard_dir == "/shared/m/tensorboard"


def test_locally_it_is_per_job_under_airflow_home(monkeypatch, tmp_path):
    monkeypatch.setenv("AIRFLOW_HOME", str(tmp_path))
    settings = BackendSettings.of(_operator(), ProcessSettings)
    assert local_dirs(settings, "job-1")[3] == os.path.join(tmp_path, "distributed", "tensorboard", "dag", "job-1")


def _operator() -> DistributedTrainingOperator:
    with DAG("dag", schedule=None):
        return DistributedTrainingOperator(task_id="t", framework="pytorch", command=["python", "x.py"])

"""``backend="ray"`` without a cluster: the pure job description and reports (``manifests.ray``), the plan the driver
builds from its actors' addresses, the connection's address, and what the backend refuses when the DAG is parsed."""

from __future__ import annotations

import json
import shlex
import subprocess
import sys
import textwrap
from typing import Any

import pytest

from airflow_distributed.hooks.ray import jobs_api_address
from airflow_distributed.manifests.ray import (
    JOB_VARIABLE,
    RAY_LAUNCH,
    ActorAddressing,
    RayOptions,
    bundles,
    job_description,
    job_layout,
    last_report,
    ray_job,
    report_line,
)
from airflow_distributed.operators import DistributedTrainingOperator
from airflow_distributed.plan import build_plan
from airflow_distributed.spec import SpecValidationError, load_spec
from airflow_distributed.spec.models import TrainingSpec
from tests.conftest import ROOT
from tests.dags.check_dags import POD_SETTINGS


def test_one_bundle_per_replica_with_the_specs_cpu_memory_and_gpus_one_core_by_default():
    spec = load_spec("pytorch", {
        "resources": {"limits": {"cpu": "2", "memory": "1Gi", "gpu": 1}},
        "pytorch": {"n_workers": 2, "default_worker": {"resources": {"requests": {"cpu": "500m"}}},
                    "worker": [{"index": 1, "resources": {"limits": {"memory": "512Mi"}}}]},
    })
    assert bundles(spec) == [
        {"CPU": 2.0, "memory": float(2**30), "GPU": 1.0},
        {"CPU": 0.5},
        {"CPU": 1.0, "memory": float(2**29)},
    ]


def test_the_description_carries_the_spec_the_driver_parses_back_and_the_entrypoint_names_the_interpreter():
    spec = load_spec("tensorflow", {"tensorflow": {"n_workers": 1, "n_ps": 1}, "env_vars": {"A": "1"}})
    layout = job_layout("/tmp/root", "job-1", "/shared/models/job-1", "/shared/ckpt/job-1")
    description = job_description(spec=spec, job_name="job-1", command=["python", "train.py"], layout=layout,
                                  files={"x.py": "print(1)"}, env={"B": "2"}, try_number=2,
                                  options=RayOptions(placement_strategy="SPREAD", resources={"ssd": 1},
                                                     accelerator_type="A100"))
    entrypoint, runtime_env = ray_job(description, "/opt/venv/bin/python")

    assert shlex.split(entrypoint) == ["/opt/venv/bin/python", "-m", "airflow_distributed.replica.ray_driver"]
    sent = json.loads(runtime_env["env_vars"][JOB_VARIABLE])
    assert TrainingSpec.model_validate(sent["spec"]) == spec
    assert sent["layout"] == {"model_dir": "/shared/models/job-1", "output_path": "/tmp/root/jobs/job-1/output.json",
                              "files_dir": "/tmp/root/jobs/job-1/files", "checkpoint_dir": "/shared/ckpt/job-1"}
    assert (sent["strategy"], sent["try_number"], sent["env"], sent["files"]) == ("SPREAD", 2, {"B": "2"},
                                                                                 {"x.py": "print(1)"})
    assert sent["bundles"] == [{"CPU": 1.0, "ssd": 1.0, "accelerator_type:A100": 0.001}] * 3
    assert (sent["liveness_key"], sent["liveness_grace"]) == ("gcs://airflow_distributed_liveness_job-1", 300.0)
    with pytest.raises(ValueError, match="STRICT_SPREAD"):
        job_description(spec=spec, job_name="j", command=[], layout=layout, files={}, env=None, try_number=1,
                        options=RayOptions(placement_strategy="ANYWHERE"))
    unwatched = job_description(spec=spec, job_name="j", command=[], layout=layout, files={}, env=None,
                                try_number=1, liveness=False)
    assert (unwatched["strategy"], unwatched["liveness_key"]) == ("PACK", None)


def test_the_plan_takes_every_address_from_the_actors():
    spec = load_spec("tensorflow", {"tensorflow": {"n_workers": 2}})
    endpoints = [("10.0.0.5", 4001), ("10.0.0.6", 4002), ("10.0.0.5", 4003)]
    plan = build_plan(spec, "job", ActorAddressing(endpoints), job_layout("/w", "job", "/m", "/c"),
                      ["python", "t.py"], backend="ray", launch=RAY_LAUNCH)

    assert [replica.address for replica in plan.replicas] == ["10.0.0.5:4001", "10.0.0.6:4002", "10.0.0.5:4003"]
    tf_config = json.loads(plan.replicas[2].env["TF_CONFIG"])
    assert tf_config["cluster"] == {"chief": ["10.0.0.5:4001"], "worker": ["10.0.0.6:4002", "10.0.0.5:4003"]}
    assert tf_config["task"] == {"type": "worker", "index": 1}


def test_the_latest_report_of_a_kind_is_read_and_a_cut_or_foreign_line_skipped():
    logs = "\n".join([
        report_line({"kind": "replicas", "replicas": [1]}),
        "(ReplicaActor pid=1) [job-master-0] step 3",
        report_line({"kind": "replicas", "replicas": [2]}),
        report_line({"kind": "outcome", "ending": "exit"})[:-5],  # cut off
        "[job-worker-0] AIRFLOW_DISTRIBUTED_RAY_REPORT not json",
    ])
    assert last_report(logs, "replicas") == {"kind": "replicas", "replicas": [2]}
    assert last_report(logs, "outcome") is None
    assert last_report("") is None


@pytest.mark.parametrize(("host", "port", "schema", "address"), [
    ("ray-head", None, None, "http://ray-head:8265"),
    ("ray-head", 443, "https", "https://ray-head:443"),
    ("https://ray.example.com", None, None, "https://ray.example.com:8265"),
    ("http://127.0.0.1:9000", 1234, None, "http://127.0.0.1:9000"),
    ("http://proxy/ray/", 80, None, "http://proxy:80/ray"),
])
def test_the_jobs_api_address_from_the_connections_fields(host, port, schema, address):
    assert jobs_api_address(host, port, schema) == address


def test_a_connection_without_host_is_refused_saying_what_to_set():
    with pytest.raises(ValueError, match="Ray dashboard's address"):
        jobs_api_address(None, 8265, None)


# ---------------------------------------------------------------------------------------------- parse-time checks

def operator(environment: Any = None, framework: str = "pytorch", **kwargs: Any) -> DistributedTrainingOperator:
    return DistributedTrainingOperator(task_id="t", framework=framework, command=["python", "train.py"],
                                       environment=environment or {"pytorch": {"n_workers": 1}}, backend="ray",
                                       **kwargs)


def problems(**kwargs: Any) -> list[tuple[str, str]]:
    with pytest.raises(SpecValidationError) as error:
        operator(**kwargs)
    return error.value.problems


REFUSED = ("node_selector", "affinity", "tolerations", "service_account", "image_pull_secrets", "security_context")


@pytest.mark.parametrize("setting", REFUSED)
def test_a_pod_setting_ray_cannot_honour_is_refused_at_parse_naming_every_place(setting):
    environment = {setting: POD_SETTINGS[setting], "pytorch": {"n_workers": 2,
                                                               "default_worker": {setting: POD_SETTINGS[setting]}}}
    found = problems(environment=environment)
    assert [path for path, _ in found] == [f"environment.{setting}", f"environment.pytorch.default_worker.{setting}"]
    assert all("is not honoured by backend='ray'" in why for _, why in found)


def test_secret_and_config_map_refs_are_refused_without_echoing_their_names():
    found = problems(environment={"pytorch": {"n_workers": 1, "worker": [
        {"index": 0, "secret_refs": ["db-password-x1"], "config_map_refs": ["cm-y2"]}]}})
    assert [path for path, _ in found] == ["environment.pytorch.worker[0].secret_refs",
                                          "environment.pytorch.worker[0].config_map_refs"]
    assert "env=" in found[0][1]
    assert not any("db-password-x1" in why or "cm-y2" in why for _, why in found)


@pytest.mark.parametrize(("argument", "value"), [
    ("image", "trainer:1"), ("model_volume", "models-claim"), ("gang_scheduling", "volcano"),
    ("scheduler_name", "volcano"), ("queue_name", "team-a"), ("queue_timeout", 600.0),
])
def test_an_argument_of_the_kubernetes_backends_ray_cannot_honour_is_refused(argument, value):
    assert [path for path, _ in problems(**{argument: value})] == [argument]


def test_horovod_elastic_pytorch_and_trainjob_settings_are_refused_naming_the_field():
    assert [path for path, _ in problems(framework="horovod", environment={"replicas": {"n_workers": 1}})] == [
        "framework"]
    elastic = {"pytorch": {"n_workers": 2, "elastic": {"min_workers": 2, "max_workers": 3}}}
    assert [path for path, _ in problems(environment=elastic)] == ["environment.pytorch.elastic"]
    assert [path for path, _ in problems(runtime="torch-distributed")] == ["runtime"]


def test_what_ray_maps_passes_the_parse():
    operator(environment={"labels": {"team": "ml"}, "resources": {"limits": {"cpu": 2, "memory": "4Gi", "tpu": 4}},
                          "pytorch": {"n_workers": 2}}, namespace="ml", deferrable=True, wait_for_completion=False,
             model_dir="/shared/models", ray_conn_id="ray_prod",
             ray_options={"placement_strategy": "STRICT_SPREAD", "resources": {"ssd": 1, "license_pool": 0.5},
                          "accelerator_type": "TPU-V4", "liveness_grace": 600})


def test_the_specs_tpus_are_reserved_as_rays_tpu_resource():
    tpus = {"resources": {"limits": {"tpu": 4}}}
    spec = load_spec("jax", {"jax": {"n_workers": 1, "default_worker": tpus}, **tpus})
    assert bundles(spec, {"ssd": 1.0}) == [{"CPU": 1.0, "TPU": 4.0, "ssd": 1.0}] * 2


@pytest.mark.parametrize(("options", "field", "said"), [
    ({"placement_strategy": "spread-out"}, "ray_options.placement_strategy", "PACK, SPREAD, STRICT_PACK, "
                                                                            "STRICT_SPREAD"),
    ({"resources": {"GPU": 1}}, "ray_options.resources.GPU", "resources.gpu"),
    ({"resources": {"memory": 1}}, "ray_options.resources.memory", "resources.memory"),
    ({"resources": {"node:10.0.0.1": 1}}, "ray_options.resources.node:10.0.0.1", "accelerator_type"),
    ({"resources": {"ssd": -1}}, "ray_options.resources.ssd", "> 0"),
    ({"resources": ["ssd"]}, "ray_options.resources", "mapping"),
    ({"accelerator_type": "accelerator_type:A100"}, "ray_options.accelerator_type", "'A100'"),
    ({"liveness_grace": 0}, "ray_options.liveness_grace", "> 0"),
    ({"liveness_grace": 10**400}, "ray_options.liveness_grace", "> 0"),
    ({"resources": {"ssd": float("nan")}}, "ray_options.resources.ssd", "> 0"),
    ({"resources": {"ssd": "hunter2"}}, "ray_options.resources.ssd", "> 0"),
    ({"accelerator_type": 7, "placement_strategy": "hunter2"}, "ray_options.placement_strategy", "STRICT_SPREAD"),
    ({"spread": True}, "ray_options.spread", "placement_strategy"),
    ("PACK", "ray_options", "mapping"),
])
def test_ray_options_that_cannot_be_mapped_are_refused_at_parse_naming_the_field(options, field, said):
    found = problems(ray_options=options)
    assert (found[0][0], said in found[0][1]) == (field, True)
    assert not any("hunter2" in why for _, why in found)  # a value is never echoed


def test_ray_options_are_refused_by_the_other_backends():
    with pytest.raises(SpecValidationError) as error:
        DistributedTrainingOperator(task_id="t", framework="pytorch", command=["python", "t.py"], backend="local",
                                    ray_options={"placement_strategy": "STRICT_SPREAD"})
    assert [path for path, _ in error.value.problems] == ["ray_options"]


def test_a_dag_using_backend_ray_parses_without_ray_installed():
    code = textwrap.dedent("""
        import sys
        class NoRay:
            def find_spec(self, name, path=None, target=None):
                if name == "ray" or name.startswith("ray."):
                    raise ImportError("ray is not installed")
        sys.meta_path.insert(0, NoRay())
        from airflow.sdk import DAG
        from airflow_distributed.operators import DistributedTrainingOperator
        with DAG(dag_id="d", schedule=None):
            DistributedTrainingOperator(task_id="t", framework="pytorch", command=["python", "x.py"],
                                        environment={"pytorch": {"n_workers": 2}}, backend="ray")
        print(sorted(m for m in sys.modules if m == "ray" or m.startswith("ray.")))
    """)
    out = subprocess.run([sys.executable, "-c", code], check=True, capture_output=True, text=True, cwd=ROOT)
    assert out.stdout.strip().splitlines()[-1] == "[]"


# ---------------------------------------------------------------------------------------------- startup phases
def _moments(name: str, placed: float | None, started: float | None, first_line: float | None = None,
             first_report: float | None = None) -> dict:
    return {"name": name, "placed": placed, "started": started, "first_line": first_line,
            "first_report": first_report}


#: The driver's report of a job of three (epoch seconds): the placement group asked for at +1 s, granted at +3 s.
T = 1_800_000_000.0
DRIVER_REPORT = {"created": T + 1, "admitted": T + 3, "replicas": [
    _moments("j-master-0", T + 3.5, T + 4, first_line=T + 6, first_report=T + 9),
    _moments("j-worker-0", T + 3.25, T + 5, first_line=T + 7),
    _moments("j-worker-1", T + 4, T + 4.5)]}


def test_a_ray_jobs_startup_maps_the_placement_group_the_actors_and_the_replicas_lines():
    from airflow_distributed.jobstate.startup import ACTOR_UNKNOWN
    from airflow_distributed.manifests.ray import ray_startup

    startup = ray_startup(DRIVER_REPORT, created=T)  # submitted at T

    assert startup["created_at"] == "2027-01-15T08:00:00Z"
    # admitted = the placement group granted, scheduled = the actor placed, running = its command started
    assert startup["replicas"]["j-master-0"] == {"created": 1.0, "admitted": 3.0, "scheduled": 3.5,
                                                 "image_pulled": None, "running": 4.0, "rendezvous": 9.0,
                                                 "rendezvous_by": "progress"}
    assert startup["replicas"]["j-worker-0"]["rendezvous_by"] == "line"
    assert startup["replicas"]["j-worker-1"]["rendezvous"] is None  # no line yet: unknown, not guessed
    # the job: its slowest replica per phase, its rendezvous the master's first progress record
    assert startup["job"] == {"created": 1.0, "admitted": 3.0, "scheduled": 4.0, "image_pulled": None,
                              "running": 5.0, "rendezvous": 9.0}
    assert (startup["slowest"]["scheduled"], startup["slowest"]["running"]) == ("j-worker-1", "j-worker-0")
    assert startup["rendezvous_by"] == "progress"
    assert startup["unknown"] == ACTOR_UNKNOWN and set(ACTOR_UNKNOWN) == {"image_pulled"}


def test_a_ray_jobs_startup_counts_from_the_driver_without_the_submission_and_never_before_it():
    from airflow_distributed.manifests.ray import ray_startup

    assert ray_startup(DRIVER_REPORT)["job"]["created"] == 0.0  # from the request for the placement group
    # a submission time after the driver's own (clocks apart): the earlier one, no phase before the job's creation
    assert ray_startup(DRIVER_REPORT, created=T + 2)["job"]["created"] == 0.0


@pytest.mark.parametrize("report", [None, {}, {"created": T, "admitted": None, "replicas": []}, "text",
                                    {"replicas": [{"placed": T}]}])
def test_no_startup_without_a_named_replica(report):
    from airflow_distributed.manifests.ray import ray_startup

    assert ray_startup(report, created=T) == {}


def test_a_moment_that_is_not_a_time_is_unknown():
    from airflow_distributed.manifests.ray import ray_startup

    report = {"created": T, "admitted": True, "replicas": [_moments("m", "soon", float("nan"), first_line=-1.0)]}
    startup = ray_startup(report)
    assert startup["replicas"]["m"] == {"created": 0.0, "admitted": None, "scheduled": None, "image_pulled": None,
                                        "running": None, "rendezvous": None, "rendezvous_by": None}


def test_the_wait_says_a_ray_jobs_startup_once_when_the_master_reported_progress(caplog):
    import logging

    from airflow_distributed.backends.ray_run import StartupNote
    from airflow_distributed.manifests.ray import report_line

    log = logging.getLogger("test_ray_startup")
    note = StartupNote("j", log)
    not_yet = {**DRIVER_REPORT, "replicas": [{**DRIVER_REPORT["replicas"][0], "first_report": None}]}
    with caplog.at_level(logging.INFO, logger=log.name):
        note("no report yet\n", {"start_time": T * 1000})
        note(report_line({"kind": "startup", **not_yet}), {"start_time": T * 1000})
        assert not note.logged and caplog.messages == []
        for _ in range(2):
            note(report_line({"kind": "startup", **DRIVER_REPORT}) + "\n", {"start_time": T * 1000})
    assert note.logged
    (line,) = caplog.messages
    assert line.startswith("startup of j: admitted 3.0s, scheduled 4.0s, running 5.0s, rendezvous 9.0s (first "
                           "progress, slowest j-master-0); unknown: image_pulled")

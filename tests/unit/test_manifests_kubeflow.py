"""The Kubeflow resources of a job: valid for the strict schema of the release they target, right in the values.

Table-driven over every framework and the Polyaxon seed examples. Schemas: ``tests/data/kubeflow/schemas``
(generated from the Kubeflow SDK's typed models, see the README there), with pod templates and metadata resolved
to the official Kubernetes schemas kubernetes-validate ships. ``job_status`` and ``success_rule`` run on
hand-written status dicts that are themselves checked against the same schemas.
"""

from __future__ import annotations

import copy
import functools
import importlib.resources
import importlib.util
import json
import os
import re
import subprocess
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import jsonschema
import pytest
from referencing import Registry, Resource

from airflow_distributed.frameworks import get_framework
from airflow_distributed.manifests.kubeflow import (
    KUBEFLOW_LAUNCH,
    MPI_HOSTFILE,
    KubeflowAddressing,
    KubeflowJobOptions,
    ManifestError,
    build_kubeflow_job,
)
from airflow_distributed.manifests.kubeflow_checks import kubeflow_problems
from airflow_distributed.manifests.kubeflow_kinds import BY_KIND, KINDS, kubeflow_kind, kubeflow_resource
from airflow_distributed.manifests.kubeflow_status import (
    REPLICA_INDEX_LABEL,
    ReplicaCounts,
    SuccessRule,
    job_status,
    job_suspended,
    master_pod_selector,
    pod_selector,
    replica_statuses,
    success_rule,
)
from airflow_distributed.manifests.kubernetes import (
    JOB_LABEL,
    MASTER_LABEL,
    OUTPUT_PATH,
    POD_LAUNCH,
    ROLE_LABEL,
    JobManifestOptions,
    TaskInstanceRef,
    layout_for_kubernetes,
)
from airflow_distributed.plan import KubernetesAddressing, build_plan
from airflow_distributed.spec import Environment, SpecValidationError, TrainingSpec, load_spec

DATA = Path(__file__).resolve().parent.parent / "data"
SEEDS = DATA / "seeds"
SCHEMAS = DATA / "kubeflow" / "schemas"
SCHEMA_FILES = {"TFJob": "tfjob-v1.json", "PyTorchJob": "pytorchjob-v1.json", "MXJob": "mxjob-v1.json",
                "MPIJob": "mpijob-v2beta1.json", "XGBoostJob": "xgboostjob-v1.json", "PaddleJob": "paddlejob-v1.json"}

NAMESPACE = "ml-team"
JOB = "train-3f9a1c2b"
RUN_ID = "manual__2026-11-21T20:14:30.689650+00:00"
TASK = TaskInstanceRef(dag_id="nightly_training", task_id="models.train", run_id=RUN_ID, map_index=-1,
                       try_number=2)
COMMAND = ("python", "train.py", "--epochs", "3")
# Variables the operators set themselves: never in a template (CONTRACT.md's, provided by Kubeflow).
OPERATOR_VARIABLES = {
    "TF_CONFIG", "MASTER_ADDR", "MASTER_PORT", "WORLD_SIZE", "RANK", "PET_MASTER_ADDR", "PET_MASTER_PORT",
    "PET_NNODES", "PET_NODE_RANK", "PET_NPROC_PER_NODE", "DMLC_ROLE", "DMLC_PS_ROOT_URI", "DMLC_PS_ROOT_PORT",
    "DMLC_NUM_SERVER", "DMLC_NUM_WORKER", "DMLC_SERVER_ID", "DMLC_WORKER_ID", "DMLC_USE_KUBERNETES",
    "DMLC_INTERFACE", "DMLC_NODE_HOST", "OMPI_MCA_orte_default_hostfile",
}
# XGBoost's tracker variables: no operator sets them, so an XGBoostJob's templates carry them.
XGBOOST_VARIABLES = {"DMLC_TRACKER_URI", "DMLC_TRACKER_PORT", "DMLC_NUM_WORKER", "DMLC_TASK_ID"}
CONTRACT_VARIABLES = {
    "AIRFLOW_DISTRIBUTED_JOB", "AIRFLOW_DISTRIBUTED_FRAMEWORK", "AIRFLOW_DISTRIBUTED_ROLE",
    "AIRFLOW_DISTRIBUTED_INDEX", "AIRFLOW_DISTRIBUTED_CLUSTER", "AIRFLOW_DISTRIBUTED_MODEL_DIR",
}

EVERY_SETTING = {
    "resources": {"cpu": {"requests": 0.5, "limits": 2}, "memory": {"requests": 256, "limits": "2Gi"},
                  "gpu": {"requests": 1, "limits": 1}},
    "node_selector": {"cloud.google.com/gke-nodepool": "training"},
    "affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
        {"matchExpressions": [{"key": "gpu-type", "operator": "In", "values": ["a100", "h100"]}]}]}}},
    "tolerations": [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}],
    "labels": {"team": "vision"},
    "annotations": {"cost-center": "ml-42"},
    "service_account": "trainer",
    "image_pull_secrets": ["registry-credentials"],
    "env_vars": [["LOG_LEVEL", "debug"]],
    "secret_refs": ["wandb-api-key"],
    "config_map_refs": ["training-defaults"],
    "security_context": {"runAsUser": 1000, "fsGroup": 1000, "allowPrivilegeEscalation": False,
                         "capabilities": {"drop": ["ALL"]}},
}


def _pods(**overrides: Any) -> JobManifestOptions:
    values: dict[str, Any] = {"namespace": NAMESPACE, "image": "registry.example/trainer:1.4", "task_instance": TASK}
    values.update(overrides)
    return JobManifestOptions(**values)


def _options(kubeflow: dict[str, Any] | None = None, **pods: Any) -> KubeflowJobOptions:
    return KubeflowJobOptions(_pods(**pods), **(kubeflow or {}))


def _plan(framework: str | None, environment: Any, namespace: str = NAMESPACE, model_dir: str | None = None,
          checked: bool = True):
    # checked=False: a spec built in code past load_spec's checks, which the builder must still refuse.
    spec = load_spec(framework, environment) if checked else TrainingSpec(
        framework=framework, environment=Environment.model_validate(environment))
    return build_plan(spec, JOB, KubeflowAddressing(namespace, spec.framework), layout_for_kubernetes(model_dir),
                      list(COMMAND), backend="kubeflow", launch=KUBEFLOW_LAUNCH, env={"EPOCHS": "3"})


def _build(framework, environment, kubeflow: dict[str, Any] | None = None, model_dir: str | None = None,
           **pods: Any) -> dict[str, Any]:
    return build_kubeflow_job(_plan(framework, environment, model_dir=model_dir), _options(kubeflow, **pods))


def _specs(body: dict[str, Any]) -> dict[str, Any]:
    return body["spec"][BY_KIND[body["kind"]].replica_specs_key]




def _container(body: dict[str, Any], rtype: str) -> dict[str, Any]:
    containers = _specs(body)[rtype]["template"]["spec"]["containers"]
    assert len(containers) == 1
    return containers[0]


def _env(body: dict[str, Any], rtype: str) -> dict[str, Any]:
    return {var["name"]: var.get("value", var.get("valueFrom")) for var in _container(body, rtype).get("env", [])}


# ------------------------------------------------------------------ schemas


@functools.cache
def _registry(kubernetes_version: str) -> Registry:
    """The official Kubernetes schemas the Kubeflow schemas refer to, from the installed kubernetes-validate."""
    folder = importlib.resources.files("kubernetes_validate").joinpath(
        "kubernetes-json-schema", f"v{kubernetes_version}.0-local-strict")
    resources = []
    for name in ("podtemplatespec-v1.json", "_definitions.json"):
        contents = json.loads(folder.joinpath(name).read_text())
        resources.append((contents["$id"], Resource.from_contents(contents)))
    return Registry().with_resources(resources)


@functools.cache
def _schema(kind: str) -> dict[str, Any]:
    return json.loads((SCHEMAS / SCHEMA_FILES[kind]).read_text())


def _validator(kind: str, definition: str | None = None) -> jsonschema.Draft202012Validator:
    schema = _schema(kind)
    registry = _registry(schema["x-pod-template-kubernetes"]).with_resource(
        schema["$id"], Resource.from_contents(schema))
    target = {"$ref": f"{schema['$id']}#/$defs/{definition}"} if definition else schema
    return jsonschema.Draft202012Validator(target, registry=registry,
                                           format_checker=jsonschema.Draft202012Validator.FORMAT_CHECKER)


def _errors(body: dict[str, Any], kind: str | None = None, definition: str | None = None) -> list[str]:
    validator = _validator(kind or body["kind"], definition)
    return [f"{'.'.join(map(str, error.absolute_path))}: {error.message}" for error in validator.iter_errors(body)]


def _validate(body: dict[str, Any]) -> None:
    errors = _errors(body)
    assert not errors, f"{body['kind']} {body['metadata']['name']}: " + "; ".join(errors[:5])


@dataclass(frozen=True)
class JobCase:
    name: str
    framework: str | None
    environment: Any
    #: replica type -> count
    replicas: dict[str, int]
    pods: dict[str, Any] = field(default_factory=dict)
    kubeflow: dict[str, Any] = field(default_factory=dict)
    model_dir: str | None = None


JOB_CASES = [
    JobCase("tensorflow chief, ps, workers", "tensorflow", {"tensorflow": {"n_workers": 2, "n_ps": 1}},
            {"Chief": 1, "PS": 1, "Worker": 2}),
    JobCase("tensorflow without ps", "tensorflow", {"tensorflow": {"n_workers": 3}}, {"Chief": 1, "Worker": 3}),
    JobCase("mxnet", "mxnet", {"mxnet": {"n_workers": 2, "n_ps": 1}}, {"Scheduler": 1, "Server": 1, "Worker": 2}),
    JobCase("pytorch", "pytorch", {"pytorch": {"n_workers": 3}}, {"Master": 1, "Worker": 3}),
    JobCase("pytorch, processes per node", "pytorch", {"pytorch": {"n_workers": 1, "n_proc_per_node": 4}},
            {"Master": 1, "Worker": 1}),
    JobCase("horovod", "horovod", {"replicas": {"n_workers": 2}}, {"Launcher": 1, "Worker": 2}),
    JobCase("xgboost", "xgboost", {"xgboost": {"n_workers": 3}}, {"Master": 1, "Worker": 3}),
    JobCase("paddle", "paddle", {"paddle": {"n_workers": 3}}, {"Master": 1, "Worker": 3}),
    JobCase("paddle, every setting, one worker", "paddle",
            {**EVERY_SETTING, "paddle": {"n_workers": 1, "default_worker": EVERY_SETTING}}, {"Master": 1, "Worker": 1}),
    JobCase("xgboost, one worker", "xgboost", {"xgboost": {"n_workers": 1, "default_worker": EVERY_SETTING}},
            {"Master": 1, "Worker": 1}),
    JobCase("master alone", "tensorflow", None, {"Chief": 1}),
    JobCase("every pod setting on master and workers", "pytorch",
            {**EVERY_SETTING, "pytorch": {"n_workers": 2, "default_worker": EVERY_SETTING}},
            {"Master": 1, "Worker": 2}),
    JobCase("the same override on every index fits", "mxnet",
            {"mxnet": {"n_workers": 2, "worker": [{"index": 0, "node_selector": {"pool": "a"}},
                                                   {"index": 1, "node_selector": {"pool": "a"}}]}},
            {"Scheduler": 1, "Worker": 2}),
    JobCase("volcano, queue, priority, kueue, claim, deadlines, pull policy", "horovod",
            {"replicas": {"n_workers": 2}}, {"Launcher": 1, "Worker": 2},
            {"gang_scheduling": "volcano", "queue_name": "team-a", "model_volume": "models-claim",
             "active_deadline_seconds": 86400, "ttl_seconds_after_finished": 600, "image_pull_policy": "Always",
             "labels": {"owner": "ml"}, "annotations": {"note": "x"}, "automount_service_account_token": True},
            {"clean_pod_policy": "all", "scheduling_queue": "research", "priority_class": "high",
             "mpi_implementation": "Intel"}),
    JobCase("scheduler-plugins, no relay, no wait, model dir at a URL", "tensorflow",
            {"tensorflow": {"n_workers": 1, "n_ps": 1}}, {"Chief": 1, "PS": 1, "Worker": 1},
            {"gang_scheduling": "scheduler-plugins", "scheduler_name": "scheduler-plugins-scheduler",
             "relay_output": False, "wait_for_master": False}, {"clean_pod_policy": "none"},
            model_dir="s3://bucket/models/run-42"),
]

SEED_CASES = [
    JobCase("seed: master resources only", "tensorflow", "polyaxon_master_resources.yaml", {"Chief": 1}),
    JobCase("seed: tensorflow 2 ps 4 workers", None, "polyaxon_tensorflow_counts.yaml",
            {"Chief": 1, "PS": 2, "Worker": 4}),
    JobCase("seed: mxnet 1 server 3 workers", None, "polyaxon_mxnet.yaml", {"Scheduler": 1, "Server": 1, "Worker": 3}),
    JobCase("seed: pytorch 3 workers", None, "polyaxon_pytorch.yaml", {"Master": 1, "Worker": 3}),
    JobCase("seed: horovod master resources", None, "polyaxon_horovod_master.yaml", {"Launcher": 1}),
    JobCase("seed: horovod 3 workers", None, "polyaxon_horovod_counts.yaml", {"Launcher": 1, "Worker": 3}),
    JobCase("seed: horovod 7 gpu workers, index 2 overridden with the default", None,
            "polyaxon_horovod_resources.yaml", {"Launcher": 1, "Worker": 7}),
]
# Seeds whose per-index override differs from the rest of its role: not expressible as one template.
SEED_SPLITS = [
    ("polyaxon_tensorflow_resources.yaml", "environment.tensorflow.worker[0]",
     "index 2 of worker has its own resources, but a TFJob runs all 4 Worker replicas from one pod template"),
    ("polyaxon_horovod_legacy_worker_resources.yaml", "environment.replicas.worker[0]",
     "index 2 of worker has its own resources, but an MPIJob runs all 7 Worker replicas from one pod template"),
]


def _seed(case: JobCase) -> JobCase:
    environment = case.environment
    if isinstance(environment, str) and environment.endswith(".yaml"):
        environment = str(SEEDS / environment)
    return JobCase(case.name, case.framework, environment, case.replicas, case.pods, case.kubeflow, case.model_dir)


ALL_CASES = JOB_CASES + [_seed(case) for case in SEED_CASES]


@pytest.mark.parametrize("case", ALL_CASES, ids=[c.name for c in ALL_CASES])
def test_every_resource_validates_against_the_strict_schema_of_its_release(case: JobCase):
    body = _build(case.framework, case.environment, case.kubeflow, case.model_dir, **case.pods)

    _validate(body)
    json.dumps(body)  # plain JSON all the way down
    assert {rtype: spec["replicas"] for rtype, spec in _specs(body).items()} == case.replicas
    assert {spec["restartPolicy"] for spec in _specs(body).values()} == {"Never"}
    assert body["spec"]["runPolicy"]["backoffLimit"] == 0


@pytest.mark.parametrize("case", ALL_CASES, ids=[c.name for c in ALL_CASES])
def test_no_problems_are_reported_for_what_fits(case: JobCase):
    assert kubeflow_problems(load_spec(case.framework, case.environment)) == []


@pytest.mark.parametrize("body, message", [
    ({"spec": {"runPolicy": {"cleanPodPolicy": "Always"}}}, "'Always' is not one of ['All', 'Running', 'None']"),
    ({"spec": {"runPolicy": {"cleanupPolicy": "All"}}}, "Additional properties are not allowed ('cleanupPolicy'"),
    ({"spec": {"tfReplicaSpecs": {"Evaluater": {"replicas": 1}}}}, "'Evaluater' is not one of"),
    ({"spec": {"tfReplicaSpecs": {"Worker": {"replicas": "2"}}}}, "'2' is not of type 'integer'"),
    ({"spec": {"tfReplicaSpecs": {"Worker": {"template": {"spec": {"containers": [
        {"name": "tensorflow", "image": "x", "resource": {}}]}}}}}},
     "Additional properties are not allowed ('resource'"),
    ({"spec": {"tfReplicaSpecs": {"Worker": {"template": {"metadata": {"labels": {"a": 1}}}}}}},
     "1 is not of type 'string'"),
    ({"apiVersion": "kubeflow.org/v2"}, "'kubeflow.org/v1' was expected"),
])
def test_the_schema_catches_what_it_claims_to(body, message):
    valid = _build("tensorflow", {"tensorflow": {"n_workers": 1}})
    broken = copy.deepcopy(valid)
    for key, value in body.items():
        if key == "spec":
            for spec_key, spec_value in value.items():
                merged = broken["spec"].setdefault(spec_key, {})
                for inner_key, inner_value in spec_value.items():
                    if isinstance(merged.get(inner_key), dict) and isinstance(inner_value, dict):
                        _deep_merge(merged[inner_key], inner_value)
                    else:
                        merged[inner_key] = inner_value
        else:
            broken[key] = value

    assert not _errors(valid)
    assert any(message in error for error in _errors(broken)), _errors(broken)


def _deep_merge(target: dict[str, Any], patch: dict[str, Any]) -> None:
    for key, value in patch.items():
        if isinstance(value, dict) and isinstance(target.get(key), dict):
            _deep_merge(target[key], value)
        else:
            target[key] = value


def test_the_mxjob_schema_is_training_operator_1_8s_and_has_no_managed_by():
    body = _build("mxnet", {"mxnet": {"n_workers": 1}})
    body["spec"]["runPolicy"]["managedBy"] = "kueue.x-k8s.io/multikueue"

    assert _schema("MXJob")["x-derived-from"] == "kubeflow-training 1.8.1 models"
    assert any("managedBy" in error for error in _errors(body))


# ------------------------------------------------------------------ kinds, roles, containers


@pytest.mark.parametrize("framework, kind, api_version, plural, container, rtypes", [
    ("tensorflow", "TFJob", "kubeflow.org/v1", "tfjobs", "tensorflow", {"Chief", "PS", "Worker"}),
    ("pytorch", "PyTorchJob", "kubeflow.org/v1", "pytorchjobs", "pytorch", {"Master", "Worker"}),
    ("mxnet", "MXJob", "kubeflow.org/v1", "mxjobs", "mxnet", {"Scheduler", "Server", "Worker"}),
    ("horovod", "MPIJob", "kubeflow.org/v2beta1", "mpijobs", "mpi", {"Launcher", "Worker"}),
    ("xgboost", "XGBoostJob", "kubeflow.org/v1", "xgboostjobs", "xgboost", {"Master", "Worker"}),
    ("paddle", "PaddleJob", "kubeflow.org/v1", "paddlejobs", "paddle", {"Master", "Worker"}),
])
def test_each_framework_becomes_its_kubeflow_kind_with_its_role_names(framework, kind, api_version, plural,
                                                                      container, rtypes):
    environment = {"replicas" if framework == "horovod" else framework: {"n_workers": 2}}
    if framework in ("tensorflow", "mxnet"):
        environment[framework]["n_ps"] = 1
    body = _build(framework, environment)
    resource = kubeflow_resource(framework)

    assert (body["apiVersion"], body["kind"]) == (api_version, kind)
    assert (resource.group, resource.version, resource.plural, resource.kind) == (
        "kubeflow.org", api_version.split("/")[1], plural, kind)
    assert set(_specs(body)) == rtypes
    for rtype in rtypes:
        assert _container(body, rtype)["name"] == container
    assert body["metadata"]["name"] == JOB
    assert body["metadata"]["namespace"] == NAMESPACE


@pytest.mark.parametrize("n_workers", [2, 10])
def test_xgboostjob_workers_derive_their_task_id_from_the_operators_rank(n_workers):
    body = _build("xgboost", {"xgboost": {"n_workers": n_workers}})
    # What the kubernetes backend gives each replica of the same spec: the values the derived ones must equal.
    plan = build_plan(load_spec("xgboost", {"xgboost": {"n_workers": n_workers}}), JOB,
                      KubernetesAddressing(NAMESPACE), layout_for_kubernetes(None), list(COMMAND),
                      backend="kubernetes", launch=POD_LAUNCH)
    master, worker = _env(body, "Master"), _env(body, "Worker")
    tracker = (f"{JOB}-master-0.{NAMESPACE}.svc", "9999", str(n_workers + 1))
    for env in (master, worker):
        assert (env["DMLC_TRACKER_URI"], env["DMLC_TRACKER_PORT"], env["DMLC_NUM_WORKER"]) == tracker
    assert master["DMLC_TASK_ID"] == plan.master.env["DMLC_TASK_ID"] and "DMLC_TASK_ID" not in worker
    command = _container(body, "Worker")["command"]
    assert command[-len(COMMAND):] == list(COMMAND)
    # The pod's shell, run here: with the RANK the operator gives worker i (i + 1), the id the plan gives it.
    for index in range(n_workers):
        replica = plan.replica(f"{JOB}-worker-{index}")
        probe = [*command[:-len(COMMAND)], "sh", "-c", 'printf %s "$DMLC_TASK_ID"']
        out = subprocess.run(probe, env={"RANK": str(index + 1), "PATH": os.environ["PATH"]}, check=True,
                             capture_output=True, text=True).stdout
        assert out == replica.env["DMLC_TASK_ID"]


@pytest.mark.parametrize("n_workers", [2, 11])
def test_paddlejob_workers_derive_their_trainer_id_and_endpoint_from_their_replica_index(n_workers):
    body = _build("paddle", {"paddle": {"n_workers": n_workers}})
    plan = _plan("paddle", {"paddle": {"n_workers": n_workers}})
    master, worker = _env(body, "Master"), _env(body, "Worker")
    endpoints = ",".join(f"{JOB}-{role}-{i}.{NAMESPACE}.svc:36543"
                         for role, i in [("master", 0), *(("worker", i) for i in range(n_workers))])
    for env in (master, worker):
        assert (env["PADDLE_TRAINER_ENDPOINTS"], env["PADDLE_TRAINERS_NUM"]) == (endpoints, str(n_workers + 1))
    assert (master["PADDLE_TRAINER_ID"], master["PADDLE_CURRENT_ENDPOINT"]) == (
        "0", f"{JOB}-master-0.{NAMESPACE}.svc:36543")
    assert "PADDLE_TRAINER_ID" not in worker and "PADDLE_CURRENT_ENDPOINT" not in worker
    command = _container(body, "Worker")["command"]
    assert command[-len(COMMAND):] == list(COMMAND)
    # The pod's shell, run here: with the index the operator's label gives worker i, the plan's values for it.
    for index in range(n_workers):
        replica = plan.replica(f"{JOB}-worker-{index}")
        probe = [*command[:-len(COMMAND)], "sh", "-c", 'printf "%s %s" "$PADDLE_TRAINER_ID" "$PADDLE_CURRENT_ENDPOINT"']
        pod_env = {"AIRFLOW_DISTRIBUTED_INDEX": str(index), "PADDLE_TRAINER_ENDPOINTS": endpoints,
                   "PATH": os.environ["PATH"]}
        out = subprocess.run(probe, env=pod_env, check=True, capture_output=True, text=True).stdout
        assert out == f"{replica.env['PADDLE_TRAINER_ID']} {replica.env['PADDLE_CURRENT_ENDPOINT']}"


def test_paddle_parameter_server_mode_is_refused_naming_n_ps():
    spec = {"paddle": {"n_workers": 2, "n_ps": 1, "default_ps": {"node_selector": {"a": "b"}},
                       "ps": [{"index": 0, "node_selector": {"a": "c"}}]}}
    problems = kubeflow_problems(load_spec("paddle", spec))
    assert [path for path, _ in problems] == ["environment.paddle.n_ps"]
    assert "a PaddleJob runs parameter servers as its Master replicas" in problems[0][1]
    assert "use backend='kubernetes' for parameter-server mode" in problems[0][1]
    with pytest.raises(ManifestError, match="takes Paddle's collective mode only"):
        build_kubeflow_job(_plan("paddle", {"paddle": {"n_workers": 1, "n_ps": 1}}), _options())


def test_the_paddlejob_schema_knows_only_master_and_worker():
    body = _build("paddle", {"paddle": {"n_workers": 1}})
    body["spec"]["paddleReplicaSpecs"]["PS"] = body["spec"]["paddleReplicaSpecs"]["Worker"]

    assert any("'PS' is not one of ['Master', 'Worker']" in error for error in _errors(body)), _errors(body)


def test_the_xgboostjob_schema_knows_only_master_and_worker():
    body = _build("xgboost", {"xgboost": {"n_workers": 1}})
    body["spec"]["xgbReplicaSpecs"]["Chief"] = body["spec"]["xgbReplicaSpecs"]["Worker"]

    assert any("'Chief' is not one of ['Master', 'Worker']" in error for error in _errors(body)), _errors(body)


def test_a_jax_job_has_no_kubeflow_resource():
    assert kubeflow_problems(load_spec("jax", {"jax": {"n_workers": 2}})) == [(
        "backend", "framework 'jax' has no Kubeflow resource; backend='kubeflow' takes tensorflow, pytorch, mxnet, "
        "horovod, xgboost, paddle; use backend='kubernetes' (one pod per replica, no operator needed)")]


def test_mxjob_trains_and_mpijob_runs_ranks_on_the_launcher_over_the_operators_hostfile():
    mxjob = _build(None, str(SEEDS / "polyaxon_mxnet.yaml"))
    mpijob = _build(None, str(SEEDS / "polyaxon_horovod_counts.yaml"))

    assert mxjob["spec"]["jobMode"] == "MXTrain"
    spec = mpijob["spec"]
    assert (spec["slotsPerWorker"], spec["runLauncherAsWorker"], spec["sshAuthMountPath"],
            spec["mpiImplementation"]) == (1, True, "/root/.ssh", "OpenMPI")
    launcher = _container(mpijob, "Launcher")["command"]
    horovodrun = launcher[launcher.index("horovodrun"):]
    assert horovodrun == ["horovodrun", "--gloo", "-np", "4", "--hostfile", MPI_HOSTFILE, "-p", "22", *COMMAND]
    worker = _container(mpijob, "Worker")
    assert worker["command"][:2] == ["sh", "-c"] and "sshd -D" in worker["command"][2]
    assert worker["ports"] == [{"name": "ssh", "containerPort": 22, "protocol": "TCP"}]


def test_gpu_launcher_and_workers_get_that_many_slots_each():
    gpus = {"resources": {"gpu": {"limits": 2}}}
    body = _build("horovod", {**gpus, "replicas": {"n_workers": 3, "default_worker": gpus}})

    assert body["spec"]["slotsPerWorker"] == 2
    command = _container(body, "Launcher")["command"]
    assert command[command.index("-np") + 1] == "8"
    for rtype in ("Launcher", "Worker"):
        resources = _container(body, rtype)["resources"]
        assert resources["requests"]["nvidia.com/gpu"] == resources["limits"]["nvidia.com/gpu"] == "2"


def test_the_launcher_waits_for_every_workers_sshd_unless_told_not_to():
    waiting = _build("horovod", {"replicas": {"n_workers": 2}})
    not_waiting = _build("horovod", {"replicas": {"n_workers": 2}}, wait_for_master=False)

    init = _specs(waiting)["Launcher"]["template"]["spec"]["initContainers"]
    assert [c["name"] for c in init] == ["wait-for-peers"]
    assert init[0]["command"][-2:] == [f"{JOB}-worker-{i}.{JOB}.{NAMESPACE}.svc:22" for i in range(2)]
    assert "initContainers" not in _specs(waiting)["Worker"]["template"]["spec"]
    assert "initContainers" not in _specs(not_waiting)["Launcher"]["template"]["spec"]


@pytest.mark.parametrize("framework, environment, port_name, port", [
    ("tensorflow", {"tensorflow": {"n_workers": 1}}, "tfjob-port", 2222),
    ("pytorch", {"pytorch": {"n_workers": 1}}, "pytorchjob-port", 23456),
    ("mxnet", {"mxnet": {"n_workers": 1}}, "mxjob-port", 9091),
    ("xgboost", {"xgboost": {"n_workers": 1}}, "xgboostjob-port", 9999),
    ("paddle", {"paddle": {"n_workers": 1}}, "master", 36543),
])
def test_the_operator_finds_the_frameworks_port_by_its_port_name(framework, environment, port_name, port):
    body = _build(framework, environment)
    for rtype in _specs(body):
        assert _container(body, rtype)["ports"] == [{"name": port_name, "containerPort": port, "protocol": "TCP"}]


# ------------------------------------------------------------------ resources


@pytest.mark.parametrize("seed, rtype, requests, limits", [
    ("polyaxon_master_resources.yaml", "Chief",
     {"cpu": "1", "memory": "256Mi", "nvidia.com/gpu": "1"}, {"cpu": "2", "memory": "1024Mi", "nvidia.com/gpu": "1"}),
    ("polyaxon_horovod_resources.yaml", "Launcher",
     {"cpu": "1", "memory": "256Mi", "nvidia.com/gpu": "1"}, {"cpu": "2", "memory": "1024Mi", "nvidia.com/gpu": "1"}),
    ("polyaxon_horovod_resources.yaml", "Worker",
     {"cpu": "1", "memory": "256Mi", "nvidia.com/gpu": "1"}, {"cpu": "2", "memory": "1024Mi", "nvidia.com/gpu": "1"}),
])
def test_seed_resources_in_kubernetes_quantities_with_nvidia_gpus(seed, rtype, requests, limits):
    framework = "tensorflow" if seed == "polyaxon_master_resources.yaml" else None
    resources = _container(_build(framework, str(SEEDS / seed)), rtype)["resources"]

    assert resources == {"requests": requests, "limits": limits}


def test_ps_and_workers_take_their_own_defaults_and_the_gpu_key_is_an_option():
    body = _build("tensorflow", {
        "resources": {"gpu": {"limits": 1}},
        "tensorflow": {"n_workers": 2, "n_ps": 2, "default_ps": {"resources": {"cpu": {"requests": 1, "limits": 1}}},
                       "default_worker": {"resources": {"gpu": {"limits": 4}}}},
    }, gpu_resource_key="amd.com/gpu")

    assert _container(body, "Chief")["resources"] == {"requests": {"amd.com/gpu": "1"}, "limits": {"amd.com/gpu": "1"}}
    assert _container(body, "PS")["resources"] == {"requests": {"cpu": "1"}, "limits": {"cpu": "1"}}
    assert _container(body, "Worker")["resources"] == {"requests": {"amd.com/gpu": "4"}, "limits": {"amd.com/gpu": "4"}}


def test_every_pod_setting_reaches_the_template():
    body = _build("pytorch", {**EVERY_SETTING, "pytorch": {"n_workers": 2, "default_worker": EVERY_SETTING}})
    for rtype in ("Master", "Worker"):
        template = _specs(body)[rtype]["template"]
        spec, container = template["spec"], _container(body, rtype)
        assert spec["nodeSelector"] == EVERY_SETTING["node_selector"]
        assert spec["affinity"] == EVERY_SETTING["affinity"]
        assert spec["tolerations"] == EVERY_SETTING["tolerations"]
        assert spec["serviceAccountName"] == "trainer"
        assert spec["imagePullSecrets"] == [{"name": "registry-credentials"}]
        assert spec["securityContext"] == {"runAsUser": 1000, "fsGroup": 1000}
        assert spec["enableServiceLinks"] is False and spec["automountServiceAccountToken"] is False
        assert container["securityContext"] == {"allowPrivilegeEscalation": False, "capabilities": {"drop": ["ALL"]}}
        assert container["envFrom"] == [{"configMapRef": {"name": "training-defaults"}},
                                        {"secretRef": {"name": "wandb-api-key"}}]
        assert _env(body, rtype)["LOG_LEVEL"] == "debug"
        assert template["metadata"]["labels"]["team"] == "vision"
        assert template["metadata"]["annotations"]["cost-center"] == "ml-42"
        assert container["resources"]["limits"] == {"cpu": "2", "memory": "2Gi", "nvidia.com/gpu": "1"}


# ------------------------------------------------------------------ per-index overrides


@pytest.mark.parametrize("seed, path, message", SEED_SPLITS, ids=[s[0] for s in SEED_SPLITS])
def test_seeds_with_an_index_of_its_own_are_refused_naming_the_index(seed, path, message):
    spec = load_spec(None, str(SEEDS / seed))

    assert kubeflow_problems(spec) == [(path, message + "; give every worker the same settings, or use "
                                                         "backend='kubernetes'")]
    with pytest.raises(ManifestError, match=re.escape(message)):
        _build(None, str(SEEDS / seed))


@pytest.mark.parametrize("framework, environment, path, index, differing", [
    ("pytorch", {"pytorch": {"n_workers": 3, "worker": [{"index": 1, "node_selector": {"pool": "big"}}]}},
     "environment.pytorch.worker[0]", 1, "node_selector"),
    ("tensorflow", {"tensorflow": {"n_ps": 3, "ps": [{"index": 0, "labels": {"a": "b"}},
                                                      {"index": 2, "resources": {"cpu": {"limits": 4}}}]}},
     "environment.tensorflow.ps[1]", 2, "resources"),
    ("mxnet", {"mxnet": {"n_ps": 2, "default_ps": {"service_account": "x"},
                         "ps": [{"index": 1, "service_account": "y", "env_vars": {"A": "1"}}]}},
     "environment.mxnet.ps[0]", 1, "env_vars, service_account"),
])
def test_an_override_that_differs_names_its_spec_path_index_and_settings(framework, environment, path, index,
                                                                         differing):
    problems = kubeflow_problems(load_spec(framework, environment))

    assert path in [where for where, _ in problems]
    message = dict(problems)[path]
    assert message.startswith(f"index {index} of ") and f"has its own {differing}," in message
    with pytest.raises(ManifestError, match=re.escape(f"index {index} of")):
        _build(framework, environment)


def test_the_odd_index_out_is_named_even_when_the_default_is_the_minority():
    # Indices 0 and 1 share an override, index 2 keeps the default: index 2 is the one named.
    override = {"node_selector": {"pool": "a"}}
    environment = {"pytorch": {"n_workers": 3, "worker": [{"index": 0, **override}, {"index": 1, **override}]}}

    problems = kubeflow_problems(load_spec("pytorch", environment))

    assert problems == [("environment.pytorch.worker", problems[0][1])]
    assert problems[0][1].startswith("index 2 of worker has its own node_selector")


def test_the_master_is_a_replica_spec_of_its_own_so_its_settings_always_fit():
    body = _build("tensorflow", {"resources": {"gpu": {"limits": 8}}, "node_selector": {"pool": "chief"},
                                 "tensorflow": {"n_workers": 2}})

    assert _specs(body)["Chief"]["template"]["spec"]["nodeSelector"] == {"pool": "chief"}
    assert "nodeSelector" not in _specs(body)["Worker"]["template"]["spec"]


def test_an_mpijob_launcher_needs_as_many_slots_as_a_worker():
    environment = {"resources": {"gpu": {"limits": 2}}, "replicas": {"n_workers": 2}}
    problems = kubeflow_problems(load_spec("horovod", environment))

    assert [where for where, _ in problems] == ["environment.resources.gpu"]
    assert "the launcher has 2 slot(s) (GPUs, else 1) and each worker 1" in problems[0][1]
    with pytest.raises(ManifestError, match=r"same slotsPerWorker"):
        _build("horovod", environment)


# ------------------------------------------------------------------ variables, labels, output


@pytest.mark.parametrize("case", ALL_CASES, ids=[c.name for c in ALL_CASES])
def test_templates_carry_the_contract_variables_and_none_the_operator_sets(case: JobCase):
    body = _build(case.framework, case.environment, case.kubeflow, case.model_dir, **case.pods)
    kind = BY_KIND[body["kind"]]
    for rtype, spec in _specs(body).items():
        env = _env(body, rtype)
        names = [var["name"] for var in _container(body, rtype).get("env", [])]
        assert len(names) == len(set(names))
        assert set(env) >= CONTRACT_VARIABLES
        operator_set = OPERATOR_VARIABLES - (XGBOOST_VARIABLES if body["kind"] == "XGBoostJob" else set())
        assert not operator_set & set(env)
        assert env["EPOCHS"] == "3"
        assert env["AIRFLOW_DISTRIBUTED_JOB"] == JOB
        is_master = rtype == kind.master_type
        assert ("AIRFLOW_DISTRIBUTED_OUTPUT" in env) is is_master
        if spec["replicas"] == 1:
            assert env["AIRFLOW_DISTRIBUTED_INDEX"] == "0"
        else:  # one template, many indices: each pod reads its own from the operator's label
            assert env["AIRFLOW_DISTRIBUTED_INDEX"] == {
                "fieldRef": {"fieldPath": f"metadata.labels['{REPLICA_INDEX_LABEL}']"}}
        if body["kind"] == "PyTorchJob":
            assert env["LOCAL_RANK"] == "0" and "PYTHONUNBUFFERED" not in env
        elif body["kind"] == "PaddleJob":
            assert "PYTHONUNBUFFERED" not in env  # the Paddle operator sets it
        else:
            assert env["PYTHONUNBUFFERED"] == "1"


@pytest.mark.parametrize("framework, environment, role, hosts", [
    ("tensorflow", {"tensorflow": {"n_workers": 2, "n_ps": 1}}, "worker",
     [f"{JOB}-worker-{i}.{NAMESPACE}.svc:2222" for i in range(2)]),
    ("pytorch", {"pytorch": {"n_workers": 1}}, "master", [f"{JOB}-master-0.{NAMESPACE}.svc:23456"]),
    ("mxnet", {"mxnet": {"n_workers": 1, "n_ps": 1}}, "server", [f"{JOB}-server-0.{NAMESPACE}.svc:9091"]),
    ("horovod", {"replicas": {"n_workers": 2}}, "launcher", [f"{JOB}-launcher.{JOB}.{NAMESPACE}.svc:2222"]),
    ("horovod", {"replicas": {"n_workers": 2}}, "worker",
     [f"{JOB}-worker-{i}.{JOB}.{NAMESPACE}.svc:2222" for i in range(2)]),
    ("xgboost", {"xgboost": {"n_workers": 1}}, "master", [f"{JOB}-master-0.{NAMESPACE}.svc:9999"]),
    ("paddle", {"paddle": {"n_workers": 2}}, "worker", [f"{JOB}-worker-{i}.{NAMESPACE}.svc:36543" for i in range(2)]),
])
def test_the_cluster_variable_names_the_services_the_operator_creates(framework, environment, role, hosts):
    body = _build(framework, environment)
    master = kubeflow_kind(framework).master_type

    assert json.loads(_env(body, master)["AIRFLOW_DISTRIBUTED_CLUSTER"])[role] == hosts


def test_labels_name_the_task_instance_job_role_and_master():
    body = _build("tensorflow", {"tensorflow": {"n_workers": 1}}, labels={"owner": "ml", JOB_LABEL: "spoofed"},
                  queue_name="team-a")
    metadata = body["metadata"]

    assert metadata["labels"] == {
        "owner": "ml",
        "airflow-distributed/dag-id": "nightly_training",
        "airflow-distributed/task-id": "models.train",
        "airflow-distributed/run-id": "manual__2026-11-21T20_14_30.689650_00_00",
        "airflow-distributed/try-number": "2",
        JOB_LABEL: JOB,
        "kueue.x-k8s.io/queue-name": "team-a",
    }
    assert metadata["annotations"]["airflow-distributed/run-id"] == RUN_ID
    for rtype, master in (("Chief", "true"), ("Worker", "false")):
        labels = _specs(body)[rtype]["template"]["metadata"]["labels"]
        assert labels[JOB_LABEL] == JOB
        assert labels[ROLE_LABEL] == rtype.lower()
        assert labels[MASTER_LABEL] == master
        assert labels["airflow-distributed/task-id"] == "models.train"
        # Kueue admits the resource as one workload: the queue label belongs on it, not on its pods.
        assert "kueue.x-k8s.io/queue-name" not in labels


@pytest.mark.parametrize("framework, environment", [
    ("tensorflow", {"tensorflow": {"n_workers": 1}}),
    ("pytorch", {"pytorch": {"n_workers": 1}}),
    ("mxnet", {"mxnet": {"n_workers": 1}}),
    ("horovod", {"replicas": {"n_workers": 1}}),
    ("xgboost", {"xgboost": {"n_workers": 1}}),
    ("paddle", {"paddle": {"n_workers": 1}}),
])
def test_the_masters_output_is_relayed_to_its_termination_message(framework, environment):
    body = _build(framework, environment)
    kind = kubeflow_kind(framework)
    master = _container(body, kind.master_type)
    template = _specs(body)[kind.master_type]["template"]["spec"]

    assert master["terminationMessagePath"] == "/dev/termination-log"
    assert master["terminationMessagePolicy"] == "File"
    assert master["command"][:3] == ["python3", "-I", "-c"]
    assert master["command"][4:6] == [OUTPUT_PATH, "/dev/termination-log"]
    assert {"name": "output", "mountPath": "/airflow/xcom"} in master["volumeMounts"]
    assert {"name": "output", "emptyDir": {}} in template["volumes"]
    for rtype in set(_specs(body)) - {kind.master_type}:
        assert "terminationMessagePath" not in _container(body, rtype)
    # No sidecar: the operator decides success from the pods' phases, which a sidecar would keep Running.
    assert [c["name"] for c in template["containers"]] == [kind.container]


def test_without_relay_the_master_runs_its_command_directly():
    body = _build("pytorch", {"pytorch": {"n_workers": 1}}, relay_output=False)

    assert _container(body, "Master")["command"] == list(COMMAND)
    assert "terminationMessagePath" not in _container(body, "Master")


def test_model_dir_volume_is_mounted_on_every_replica_unless_it_is_a_url():
    claimed = _build("pytorch", {"pytorch": {"n_workers": 1}}, model_volume="models-claim")
    at_url = _build("pytorch", {"pytorch": {"n_workers": 1}}, model_dir="s3://bucket/run")

    for rtype in ("Master", "Worker"):
        assert {"name": "model-dir", "persistentVolumeClaim": {"claimName": "models-claim"}} in (
            _specs(claimed)[rtype]["template"]["spec"]["volumes"])
        assert {"name": "model-dir", "mountPath": "/airflow-distributed/model"} in (
            _container(claimed, rtype)["volumeMounts"])
        assert _env(at_url, rtype)["AIRFLOW_DISTRIBUTED_MODEL_DIR"] == "s3://bucket/run"
        assert all(v["name"] != "model-dir" for v in _specs(at_url)[rtype]["template"]["spec"].get("volumes", []))


# ------------------------------------------------------------------ run policy


@pytest.mark.parametrize("policy, expected", [(None, "Running"), ("all", "All"), ("running", "Running"),
                                              ("none", "None")])
def test_clean_pod_policy(policy, expected):
    body = _build("pytorch", {"pytorch": {"n_workers": 1}}, {"clean_pod_policy": policy})

    assert body["spec"]["runPolicy"]["cleanPodPolicy"] == expected


def test_gang_scheduling_asks_for_every_replica_in_the_scheduling_policy():
    body = _build("horovod", {"replicas": {"n_workers": 2}},
                  {"scheduling_queue": "research", "priority_class": "high"},
                  gang_scheduling="volcano", ttl_seconds_after_finished=600, active_deadline_seconds=3600)
    policy = body["spec"]["runPolicy"]

    assert policy == {"cleanPodPolicy": "Running", "backoffLimit": 0, "ttlSecondsAfterFinished": 600,
                      "activeDeadlineSeconds": 3600,
                      "schedulingPolicy": {"minAvailable": 3, "queue": "research", "priorityClass": "high"}}
    for spec in _specs(body).values():
        assert spec["template"]["spec"]["schedulerName"] == "volcano"


def test_without_gang_scheduling_there_is_no_scheduling_policy():
    body = _build("pytorch", {"pytorch": {"n_workers": 2}})

    assert "schedulingPolicy" not in body["spec"]["runPolicy"]
    assert all("schedulerName" not in spec["template"]["spec"] for spec in _specs(body).values())


@pytest.mark.parametrize("kubeflow, pods, message", [
    ({"clean_pod_policy": "All"}, {}, "clean_pod_policy 'All' is not supported"),
    ({"scheduling_queue": "q"}, {}, "only with gang scheduling"),
    ({"priority_class": "high"}, {}, "only with gang scheduling"),
    ({"mpi_implementation": "mvapich"}, {}, "mpi_implementation 'mvapich'"),
])
def test_invalid_options(kubeflow, pods, message):
    with pytest.raises(ValueError, match=message):
        _options(kubeflow, **pods)


# ------------------------------------------------------------------ errors and purity


def test_plans_not_built_for_this_backend_are_refused():
    spec = load_spec("pytorch", {"pytorch": {"n_workers": 1}})
    kubernetes = build_plan(spec, JOB, KubernetesAddressing(NAMESPACE), layout_for_kubernetes(), ["t"],
                            backend="kubernetes", launch=POD_LAUNCH)
    wrong_addresses = build_plan(spec, JOB, KubernetesAddressing(NAMESPACE), layout_for_kubernetes(), ["t"],
                                 backend="kubeflow", launch=KUBEFLOW_LAUNCH)

    with pytest.raises(ValueError, match="built for the 'kubernetes' backend"):
        build_kubeflow_job(kubernetes, _options())
    with pytest.raises(ValueError, match=r"KubeflowAddressing\('ml-team', 'pytorch'\)"):
        build_kubeflow_job(wrong_addresses, _options())
    with pytest.raises(ValueError, match=r"KubeflowAddressing\('elsewhere', 'pytorch'\)"):
        build_kubeflow_job(_plan("pytorch", {"pytorch": {"n_workers": 1}}), _options(namespace="elsewhere"))


def test_an_invalid_pod_setting_names_the_replica_type_and_field():
    message = f"Worker replicas of {JOB}: affinity: unknown field 'nodeAfinity'"
    environment = {"pytorch": {"n_workers": 2, "default_worker": {"affinity": {"nodeAfinity": {}}}}}
    with pytest.raises(SpecValidationError):  # refused when the DAG is parsed
        load_spec("pytorch", environment)
    with pytest.raises(ManifestError, match=re.escape(message)):
        build_kubeflow_job(_plan("pytorch", environment, checked=False), _options())


@pytest.mark.parametrize("case", JOB_CASES, ids=[c.name for c in JOB_CASES])
def test_builder_leaves_its_inputs_unchanged_and_is_deterministic(case: JobCase):
    plan = _plan(case.framework, case.environment, model_dir=case.model_dir)
    options = _options(case.kubeflow, **case.pods)
    before = ([copy.deepcopy(r.settings) for r in plan.replicas], [dict(r.env) for r in plan.replicas],
              [r.command for r in plan.replicas], copy.deepcopy(options))

    first = build_kubeflow_job(plan, options)
    second = build_kubeflow_job(plan, options)

    assert ([r.settings for r in plan.replicas], [dict(r.env) for r in plan.replicas],
            [r.command for r in plan.replicas], options) == before
    assert first == second


# ------------------------------------------------------------------ status


def _condition(ctype: str, status: str, at: str, reason: str = "", message: str = "") -> dict[str, str]:
    condition = {"type": ctype, "status": status, "lastUpdateTime": at, "lastTransitionTime": at}
    if reason:
        condition["reason"] = reason
    if message:
        condition["message"] = message
    return condition


T0, T1, T2 = "2026-11-21T20:14:31Z", "2026-11-21T20:14:40Z", "2026-11-21T20:20:02Z"


@dataclass(frozen=True)
class StatusCase:
    name: str
    status: dict[str, Any] | None
    expected: tuple[str, str, str]
    kind: str = "TFJob"


STATUS_CASES = [
    StatusCase("no status yet", None, ("pending", "", "the operator has not reported on the job yet")),
    StatusCase("created", {"conditions": [_condition("Created", "True", T0, "TFJobCreated", "TFJob ml/x is created.")]},
               ("pending", "TFJobCreated", "TFJob ml/x is created.")),
    StatusCase("running", {"conditions": [
        _condition("Created", "True", T0, "TFJobCreated"),
        _condition("Running", "True", T1, "TFJobRunning", "TFJob ml/x is running.")],
        "replicaStatuses": {"Chief": {"active": 1}, "Worker": {"active": 2}}},
        ("running", "TFJobRunning", "TFJob ml/x is running.")),
    StatusCase("succeeded: Running turned False", {"conditions": [
        _condition("Created", "True", T0, "TFJobCreated"),
        _condition("Running", "False", T2, "TFJobRunning"),
        _condition("Succeeded", "True", T2, "TFJobSucceeded", "TFJob ml/x successfully completed.")],
        "replicaStatuses": {"Chief": {"succeeded": 1}, "Worker": {"active": 2}}},
        ("succeeded", "TFJobSucceeded", "TFJob ml/x successfully completed.")),
    StatusCase("failed", {"conditions": [
        _condition("Created", "True", T0, "PyTorchJobCreated"),
        _condition("Running", "False", T2, "PyTorchJobRunning"),
        _condition("Failed", "True", T2, "PyTorchJobFailed",
                   "PyTorchJob ml/x has failed because 1 Worker replica(s) failed.")],
        "replicaStatuses": {"Master": {"active": 1}, "Worker": {"failed": 1, "active": 1}}},
        ("failed", "PyTorchJobFailed", "PyTorchJob ml/x has failed because 1 Worker replica(s) failed."),
        kind="PyTorchJob"),
    StatusCase("failed without a message: the replica counts say what", {"conditions": [
        _condition("Failed", "True", T2, "MPIJobFailed")],
        "replicaStatuses": {"Launcher": {"failed": 1}, "Worker": {"active": 2}}},
        ("failed", "MPIJobFailed", "failed replicas: 1 Launcher"), kind="MPIJob"),
    StatusCase("last transition wins, whatever the list order", {"conditions": [
        _condition("Running", "True", T1, "MXJobRunning"), _condition("Created", "True", T0, "MXJobCreated")]},
        ("running", "MXJobRunning", ""), kind="MXJob"),
    StatusCase("restarting counts as running", {"conditions": [
        _condition("Running", "True", T0, "TFJobRunning"),
        _condition("Restarting", "True", T1, "TFJobRestarting", "TFJob x is restarting because 1 Worker failed.")]},
        ("running", "TFJobRestarting", "TFJob x is restarting because 1 Worker failed.")),
    StatusCase("a finished job stays finished: Succeeded beats a later Running", {"conditions": [
        _condition("Succeeded", "True", T1, "TFJobSucceeded"), _condition("Running", "True", T2, "TFJobRunning")]},
        ("succeeded", "TFJobSucceeded", "")),
    StatusCase("suspended", {"conditions": [
        _condition("Created", "True", T0, "MPIJobCreated"), _condition("Suspended", "True", T1, "MPIJobSuspended")]},
        ("pending", "MPIJobSuspended", ""), kind="MPIJob"),
]


@pytest.mark.parametrize("case", STATUS_CASES, ids=[c.name for c in STATUS_CASES])
def test_job_status(case: StatusCase):
    obj = {"apiVersion": "kubeflow.org/v1", "kind": case.kind, "metadata": {"name": "x", "namespace": "ml"}}
    if case.status is not None:
        obj["status"] = case.status
        # The fixtures are what an operator writes: they validate against the status schema of their kind.
        assert not _errors(case.status, case.kind, "KubeflowOrgV1JobStatus")

    assert tuple(job_status(obj)) == case.expected
    assert job_status(obj).state == case.expected[0]


@pytest.mark.parametrize(("spec", "conditions", "expected"), [
    ({}, [], False),
    ({"runPolicy": {"suspend": True}}, [], True),  # Kueue's webhook, before the operator says so
    ({"runPolicy": {"suspend": False}}, [("Created", "True", "PyTorchJobCreated")], False),
    ({}, [("Created", "True", "PyTorchJobCreated"), ("Suspended", "True", "PyTorchJobSuspended")], True),
    ({}, [("Created", "True", "PyTorchJobCreated"), ("Suspended", "False", "PyTorchJobResumed")], False),
], ids=["nothing", "spec-only", "spec-false", "condition", "resumed"])
def test_a_job_is_suspended_by_its_run_policy_or_a_true_suspended_condition(spec, conditions, expected):
    obj = {"kind": "PyTorchJob", "spec": spec,
           "status": {"conditions": [_condition(ctype, status, T0, reason) for ctype, status, reason in conditions]}}
    assert job_suspended(obj) is expected
    assert job_suspended(None) is False


def test_replica_statuses():
    obj = {"status": {"replicaStatuses": {"Chief": {"succeeded": 1}, "Worker": {"active": 2, "failed": 1}}}}

    assert replica_statuses(obj) == {"Chief": ReplicaCounts(succeeded=1), "Worker": ReplicaCounts(active=2, failed=1)}
    assert replica_statuses({}) == {}


def _job(kind: str, rtypes: list[str], **spec: Any) -> dict[str, Any]:
    specs = {rtype: {"replicas": 1} for rtype in rtypes}
    return {"kind": kind, "metadata": {"name": "x"}, "spec": {**spec, BY_KIND[kind].replica_specs_key: specs}}


@pytest.mark.parametrize("obj, rule", [
    (_job("TFJob", ["Chief", "PS", "Worker"]), SuccessRule("Chief", 0, False, "the Chief succeeded")),
    (_job("TFJob", ["Master", "Worker"]), SuccessRule("Master", 0, False, "the Master succeeded")),
    (_job("TFJob", ["PS", "Worker"]), SuccessRule("Worker", 0, False, "worker 0 succeeded (a TFJob without a Chief)")),
    (_job("TFJob", ["Worker"], successPolicy="AllWorkers"),
     SuccessRule("Worker", None, True, "every Worker succeeded (successPolicy AllWorkers)")),
    (_job("PyTorchJob", ["Master", "Worker"]), SuccessRule("Master", 0, False, "the Master succeeded")),
    (_job("PyTorchJob", ["Worker"]),
     SuccessRule("Worker", None, True, "every Worker succeeded (a PyTorchJob without a Master)")),
    (_job("PyTorchJob", ["Worker"], elasticPolicy={"minReplicas": 1, "maxReplicas": 4}),
     SuccessRule("Worker", None, False, "a Worker succeeded (elastic, without a Master)")),
    (_job("MXJob", ["Scheduler", "Server", "Worker"]), SuccessRule("Scheduler", 0, False, "the Scheduler succeeded")),
    (_job("MPIJob", ["Launcher", "Worker"]), SuccessRule("Launcher", 0, False, "the Launcher succeeded")),
    (_job("XGBoostJob", ["Master", "Worker"]), SuccessRule("Master", 0, False, "the Master succeeded")),
    (_job("PaddleJob", ["Master", "Worker"]), SuccessRule("Master", 0, False, "the Master succeeded")),
    (_job("PaddleJob", ["Worker"]),
     SuccessRule("Worker", None, True, "every Worker succeeded (a PaddleJob without a Master)")),
], ids=["tfjob chief", "tfjob old master", "tfjob without chief", "tfjob all workers", "pytorchjob master",
        "pytorchjob without master", "pytorchjob elastic", "mxjob", "mpijob", "xgboostjob", "paddlejob master",
        "paddlejob collective, no master"])
def test_success_rule_per_kind(obj, rule):
    assert success_rule(obj) == rule


@pytest.mark.parametrize("obj, message", [
    (_job("MXJob", ["Server", "Worker"]), "MXJob x has no Scheduler"),
    (_job("XGBoostJob", ["Worker"]), "XGBoostJob x has no Master"),
    (_job("MPIJob", ["Worker"]), "MPIJob x has no Launcher, whose end decides its success"),
    ({"kind": "TrainJob"}, "'TrainJob' is not a Kubeflow training job kind; known: TFJob, PyTorchJob, MXJob, MPIJob, "
                           "XGBoostJob, PaddleJob"),
])
def test_success_rule_refuses_what_it_cannot_decide(obj, message):
    with pytest.raises(ValueError, match=re.escape(message)):
        success_rule(obj)


@pytest.mark.parametrize("framework", sorted(KINDS))
def test_a_kind_is_one_record_that_the_readers_read(framework):
    """The kind's record holds its facts; the read-back side, the sensors and the framework's master agree with it."""
    from airflow_distributed.manifests.kubeflow_status import REPLICA_SPECS_KEY
    from airflow_distributed.sensors.base import KIND_FRAMEWORK

    kind = kubeflow_kind(framework)
    assert BY_KIND[kind.kind] is kind
    assert REPLICA_SPECS_KEY[kind.kind] == kind.replica_specs_key
    assert KIND_FRAMEWORK[kind.kind] == framework
    assert kind.master_types[0] == kind.replica_types[get_framework(framework).master_role]
    # Each type the record takes for the master decides a job that has it, whatever else the job has.
    for master in kind.master_types:
        job = _job(kind.kind, [master, *(t for t in kind.replica_types.values() if t not in kind.master_types)])
        assert success_rule(job) == SuccessRule(master, 0, False, f"the {master} succeeded")


@pytest.mark.parametrize("framework, environment, selector", [
    ("tensorflow", {"tensorflow": {"n_workers": 2}}, f"training.kubeflow.org/job-name={JOB},"
     "training.kubeflow.org/replica-type=chief,training.kubeflow.org/replica-index=0"),
    ("pytorch", {"pytorch": {"n_workers": 2}}, f"training.kubeflow.org/job-name={JOB},"
     "training.kubeflow.org/replica-type=master,training.kubeflow.org/replica-index=0"),
    ("mxnet", {"mxnet": {"n_workers": 2}}, f"training.kubeflow.org/job-name={JOB},"
     "training.kubeflow.org/replica-type=scheduler,training.kubeflow.org/replica-index=0"),
    ("horovod", {"replicas": {"n_workers": 2}}, f"training.kubeflow.org/job-name={JOB},"
     "training.kubeflow.org/replica-type=launcher"),
    ("xgboost", {"xgboost": {"n_workers": 2}}, f"training.kubeflow.org/job-name={JOB},"
     "training.kubeflow.org/replica-type=master,training.kubeflow.org/replica-index=0"),
    ("paddle", {"paddle": {"n_workers": 2}}, f"training.kubeflow.org/job-name={JOB},"
     "training.kubeflow.org/replica-type=master,training.kubeflow.org/replica-index=0"),
])
def test_our_master_is_the_replica_that_decides_and_its_pod_is_found_by_labels(framework, environment, selector):
    body = _build(framework, environment)

    assert success_rule(body).replica_type == kubeflow_kind(framework).master_type
    assert master_pod_selector(body) == selector
    assert pod_selector(JOB) == f"training.kubeflow.org/job-name={JOB}"


# ------------------------------------------------------------------ the schema generator


def test_the_generator_derives_a_strict_object_per_model_with_its_constraints():
    path = DATA / "kubeflow" / "generate_schemas.py"
    module_spec = importlib.util.spec_from_file_location("generate_schemas", path)
    generator = importlib.util.module_from_spec(module_spec)
    module_spec.loader.exec_module(generator)
    sdk = {"version": "0.0.1", "models": {
        "KubeflowOrgV1TFJob": {"attributes": {"apiVersion": "str", "kind": "str", "metadata": "V1ObjectMeta",
                                              "spec": "KubeflowOrgV1TFJobSpec"}, "required": []},
        "KubeflowOrgV1TFJobSpec": {"attributes": {"tfReplicaSpecs": "dict(str, KubeflowOrgV1ReplicaSpec)"},
                                   "required": ["tfReplicaSpecs"]},
        "KubeflowOrgV1ReplicaSpec": {"attributes": {"replicas": "int", "restartPolicy": "str",
                                                    "template": "V1PodTemplateSpec"}, "required": []},
    }}

    schema = generator.kind_schema("tfjob-v1.json", generator.KINDS["tfjob-v1.json"], sdk)

    defs = schema["$defs"]
    assert all(d["additionalProperties"] is False for d in defs.values())
    assert defs["KubeflowOrgV1TFJobSpec"]["required"] == ["tfReplicaSpecs"]
    assert defs["KubeflowOrgV1TFJobSpec"]["properties"]["tfReplicaSpecs"]["propertyNames"]["enum"][:3] == [
        "Chief", "Master", "PS"]
    assert defs["KubeflowOrgV1ReplicaSpec"]["properties"]["restartPolicy"]["enum"] == [
        "Always", "OnFailure", "Never", "ExitCode"]
    assert defs["KubeflowOrgV1ReplicaSpec"]["properties"]["template"] == {
        "$ref": "https://kubernetes.io/api/podtemplatespec/v1"}
    assert defs["KubeflowOrgV1TFJob"]["properties"]["kind"] == {"const": "TFJob"}
    assert schema["x-derived-from"] == "kubeflow-training 0.0.1 models"


def test_a_pytorchjob_of_several_processes_per_replica_says_so_and_runs_one_launch_line_per_template():
    body = _build("pytorch", {"pytorch": {"n_workers": 2, "n_proc_per_node": 4}})
    assert body["spec"]["nprocPerNode"] == "4"
    commands = [_container(body, rtype)["command"] for rtype in ("Master", "Worker")]
    # The master's runs under the output relay; both end in the same launch line around the job's command.
    for command in commands:
        assert any("torch.distributed.run --nnodes 3 --node-rank \"$RANK\" --nproc-per-node 4" in part
                   for part in command), command
    assert "nprocPerNode" not in _build("pytorch", {"pytorch": {"n_workers": 2, "n_proc_per_node": 1}})["spec"]

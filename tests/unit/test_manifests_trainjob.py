"""The TrainJob of a job: valid for the strict schema derived from ``kubeflow-trainer-api`` 2.3, right in the
values; its state read back from hand-written statuses (themselves valid for the schema); the node prologue run
by a real ``sh``.
"""

from __future__ import annotations

import json
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import jsonschema
import pytest

from airflow_distributed.hooks.trainjob import node_statuses
from airflow_distributed.manifests.kubeflow_status import JobStatus
from airflow_distributed.manifests.kubernetes import (
    JOB_LABEL,
    JobManifestOptions,
    TaskInstanceRef,
    layout_for_kubernetes,
)
from airflow_distributed.manifests.trainjob import (
    PATCH_MANAGER,
    TRAINJOB_LAUNCH,
    TrainJobAddressing,
    TrainJobOptions,
    build_trainjob,
    node_program,
)
from airflow_distributed.manifests.trainjob_checks import trainjob_problems
from airflow_distributed.manifests.trainjob_status import (
    node_selector,
    trainer_progress,
    trainjob_status,
    trainjob_suspended,
)
from airflow_distributed.plan import build_plan
from airflow_distributed.spec import load_spec

SCHEMA = json.loads((Path(__file__).resolve().parent.parent / "data" / "trainjob" / "trainjob-v1alpha1.json")
                    .read_text())
NAMESPACE = "ml"
#: The memory-backed /dev/shm of a node with no memory limit (manifests.shared_memory).
SHM = {"name": "dshm", "emptyDir": {"medium": "Memory"}}
TI = TaskInstanceRef(dag_id="nightly", task_id="train", run_id="manual__2026-01-01", try_number=1)


def build(environment: dict, *, pods: dict | None = None, model_dir: str | None = None, framework: str = "pytorch",
          **options: Any) -> dict:
    spec = load_spec(framework, environment)
    layout = layout_for_kubernetes(model_dir, job_name="train-1a2b")
    plan = build_plan(spec, "train-1a2b", TrainJobAddressing(NAMESPACE), layout, ["python", "train.py"],
                      backend="trainjob", launch=TRAINJOB_LAUNCH)
    manifest = JobManifestOptions(namespace=NAMESPACE, image="trainer:1", task_instance=TI, **(pods or {}))
    options.setdefault("n_proc_per_node", getattr(spec.cluster, "n_proc_per_node", None))
    body = build_trainjob(plan, TrainJobOptions(manifest, **options))
    jsonschema.Draft7Validator(SCHEMA).validate(body)
    return body


def node_pod(body: dict) -> dict:
    patch = body["spec"]["runtimePatches"][0]
    assert patch["manager"] == PATCH_MANAGER
    replicated = patch["trainingRuntimeSpec"]["template"]["spec"]["replicatedJobs"]
    assert [job["name"] for job in replicated] == ["node"]
    return replicated[0]["template"]["spec"]["template"]


@dataclass
class Case:
    name: str
    environment: dict
    expected: dict[str, Any]
    pods: dict = field(default_factory=dict)
    options: dict = field(default_factory=dict)
    model_dir: str | None = None


CASES = [
    Case("master alone", {}, {"trainer.numNodes": 1, "pod.spec.volumes": [
        {"name": "model-dir", "emptyDir": {}}, {"name": "output", "emptyDir": {}}, SHM]}),
    Case("workers and processes per node", {"pytorch": {"n_workers": 3, "n_proc_per_node": 4}},
         {"trainer.numNodes": 4, "trainer.numProcPerNode": 4}),
    Case("resources per node", {"resources": {"gpu": {"requests": 2, "limits": 2}, "memory": {"limits": 2048}}},
         {"trainer.resourcesPerNode": {"requests": {"nvidia.com/gpu": "2"},
                                       "limits": {"nvidia.com/gpu": "2", "memory": "2048Mi"}}}),
    Case("pod settings as a runtime patch", {
        "node_selector": {"pool": "a100"}, "service_account": "trainer", "image_pull_secrets": ["regcred"],
        "affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
            {"matchExpressions": [{"key": "zone", "operator": "In", "values": ["a"]}]}]}}},
        "security_context": {"runAsUser": 1000, "fsGroup": 100},
        "labels": {"team": "vision"}, "annotations": {"owner": "ml"},
    }, {"pod.spec.nodeSelector": {"pool": "a100"}, "pod.spec.serviceAccountName": "trainer",
        "pod.spec.imagePullSecrets": [{"name": "regcred"}],
        "pod.spec.securityContext": {"runAsUser": 1000, "fsGroup": 100},
        "pod.spec.affinity.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution.nodeSelectorTerms": [
            {"matchExpressions": [{"key": "zone", "operator": "In", "values": ["a"]}]}],
        "pod.metadata.labels.team": "vision", "pod.metadata.annotations.owner": "ml"}),
    Case("model dir on a claim", {}, {"pod.spec.volumes": [
        {"name": "model-dir", "persistentVolumeClaim": {"claimName": "models"}}, {"name": "output", "emptyDir": {}},
        SHM], "pod.spec.containers": [{"name": "node", "volumeMounts": [
            {"name": "model-dir", "mountPath": "/mnt/models"}, {"name": "output", "mountPath": "/airflow/xcom"},
            {"name": "dshm", "mountPath": "/dev/shm"}]}]},
         pods={"model_volume": "models"}, model_dir="/mnt/models"),
    Case("a model dir URL mounts nothing for it", {}, {"pod.spec.volumes": [{"name": "output", "emptyDir": {}}, SHM]},
         model_dir="s3://models/nightly"),
    Case("namespaced runtime, Kueue queue, deadline", {}, {
        "runtimeRef": {"apiGroup": "trainer.kubeflow.org", "kind": "TrainingRuntime", "name": "torch-gpu"},
        "metadata.labels.kueue\\.x-k8s\\.io/queue-name": "team-a", "spec.activeDeadlineSeconds": 3660},
         pods={"queue_name": "team-a", "active_deadline_seconds": 3660},
         options={"runtime": "torch-gpu", "runtime_kind": "TrainingRuntime"}),
]


def lookup(body: dict, path: str) -> Any:
    roots = {"trainer": body["spec"]["trainer"], "pod": node_pod(body), "runtimeRef": body["spec"]["runtimeRef"],
             "metadata": body["metadata"], "spec": body["spec"]}
    # "." separates keys; "\." is a dot inside a key (a label name).
    head, *keys = path.replace("\\.", "\0").split(".")
    value = roots[head]
    for key in keys:
        value = value[key.replace("\0", ".")]
    return value


@pytest.mark.parametrize("case", CASES, ids=lambda case: case.name)
def test_the_trainjob_is_valid_for_the_strict_schema_and_carries_the_spec(case: Case):
    body = build(case.environment, pods=case.pods, model_dir=case.model_dir, **case.options)
    for path, expected in case.expected.items():
        assert lookup(body, path) == expected, path
    assert (body["apiVersion"], body["kind"]) == ("trainer.kubeflow.org/v1alpha1", "TrainJob")
    assert body["metadata"]["labels"][JOB_LABEL] == "train-1a2b" == body["metadata"]["name"]
    assert node_pod(body)["metadata"]["labels"][JOB_LABEL] == "train-1a2b"
    names = {item["name"] for item in body["spec"]["trainer"]["env"]}
    assert {"AIRFLOW_DISTRIBUTED_JOB", "AIRFLOW_DISTRIBUTED_CLUSTER", "AIRFLOW_DISTRIBUTED_OUTPUT"} <= names
    # The runtime computes these per node, and its webhook refuses a TrainJob that sets them.
    assert not names & {"PET_NNODES", "PET_NODE_RANK", "PET_MASTER_ADDR", "RANK", "WORLD_SIZE", "MASTER_ADDR",
                        "AIRFLOW_DISTRIBUTED_ROLE", "AIRFLOW_DISTRIBUTED_INDEX"}


def test_the_cluster_variable_names_the_nodes_as_jobset_does():
    body = build({"pytorch": {"n_workers": 2}})
    env = {item["name"]: item["value"] for item in body["spec"]["trainer"]["env"]}
    assert json.loads(env["AIRFLOW_DISTRIBUTED_CLUSTER"]) == {
        "master": ["train-1a2b-node-0-0.train-1a2b.ml.svc:29500"],
        "worker": ["train-1a2b-node-0-1.train-1a2b.ml.svc:29500", "train-1a2b-node-0-2.train-1a2b.ml.svc:29500"],
    }


def test_a_jax_job_references_the_jax_runtime_which_sets_the_jax_variables():
    body = build({"jax": {"n_workers": 1}}, framework="jax")
    assert body["spec"]["runtimeRef"]["name"] == "jax-distributed" and body["spec"]["trainer"]["numNodes"] == 2
    env = {item["name"]: item["value"] for item in body["spec"]["trainer"]["env"]}
    assert not [name for name in env if name.startswith("JAX_")]
    assert env["AIRFLOW_DISTRIBUTED_FRAMEWORK"] == "jax"
    prologue = body["spec"]["trainer"]["command"][2]
    assert "AIRFLOW_DISTRIBUTED_ROLE" in prologue and "MASTER_ADDR" not in prologue


NODE_VARIABLES = ["AIRFLOW_DISTRIBUTED_ROLE", "AIRFLOW_DISTRIBUTED_INDEX", "AIRFLOW_DISTRIBUTED_OUTPUT", "RANK",
                  "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT"]


@pytest.mark.parametrize(("rank", "expected"), [
    (0, ["master", "0", "/airflow/xcom/return.json", "0", "3", "train-1a2b-node-0-0.train-1a2b", "29500"]),
    (2, ["worker", "1", None, "2", "3", "train-1a2b-node-0-0.train-1a2b", "29500"]),
])
def test_each_node_finds_its_role_index_and_rank_when_it_starts(rank, expected):
    """The prologue run by a real sh, with what the Job controller and the torch runtime give a node."""
    spec = load_spec("pytorch", {"pytorch": {"n_workers": 2}})
    show = f"import json, os; print(json.dumps([os.environ.get(k) for k in {NODE_VARIABLES!r}]))"
    plan = build_plan(spec, "train-1a2b", TrainJobAddressing(NAMESPACE), layout_for_kubernetes(None,
                      job_name="train-1a2b"), [sys.executable, "-c", show], backend="trainjob", launch=TRAINJOB_LAUNCH)
    argv = node_program(plan, JobManifestOptions(namespace=NAMESPACE, image="trainer:1", relay_output=False))
    body_env = {item["name"]: item["value"] for item in build({"pytorch": {"n_workers": 2}})["spec"]["trainer"]["env"]}
    env = {**body_env, "PATH": "/usr/bin:/bin", "JOB_COMPLETION_INDEX": str(rank), "PET_NODE_RANK": str(rank),
           "PET_NNODES": "3", "PET_MASTER_ADDR": "train-1a2b-node-0-0.train-1a2b", "PET_MASTER_PORT": "29500"}
    out = subprocess.run(argv, env=env, capture_output=True, text=True, check=True).stdout
    assert json.loads(out) == expected


def test_an_xgboost_job_references_the_xgboost_runtime_and_leaves_its_reserved_variables_to_it():
    body = build({"xgboost": {"n_workers": 2}}, framework="xgboost")
    assert body["spec"]["runtimeRef"]["name"] == "xgboost-distributed" and body["spec"]["trainer"]["numNodes"] == 3
    assert "numProcPerNode" not in body["spec"]["trainer"]
    env = {item["name"]: item["value"] for item in body["spec"]["trainer"]["env"]}
    # The runtime's webhook forbids these four in spec.trainer.env.
    assert not [name for name in env if name.startswith("DMLC_")]
    assert env["AIRFLOW_DISTRIBUTED_FRAMEWORK"] == "xgboost"


XGBOOST_VARIABLES = ["AIRFLOW_DISTRIBUTED_ROLE", "AIRFLOW_DISTRIBUTED_INDEX", "DMLC_TRACKER_URI", "DMLC_TRACKER_PORT",
                     "DMLC_TASK_ID", "DMLC_NUM_WORKER", "RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT"]
TRACKER = "train-1a2b-node-0-0.train-1a2b"


@pytest.mark.parametrize(("rank", "expected"), [
    (0, ["master", "0", TRACKER, "29500", "00", "11", "0", "11", TRACKER, "29500"]),
    (2, ["worker", "1", TRACKER, "29500", "02", "11", "2", "11", TRACKER, "29500"]),
    (10, ["worker", "9", TRACKER, "29500", "10", "11", "10", "11", TRACKER, "29500"]),
])
def test_each_xgboost_node_gets_the_projects_contract_over_the_runtimes_variables(rank, expected):
    """The prologue run by a real sh, with the variables the xgboost-distributed runtime gives node ``rank`` of 11
    with 2 GPUs each: its bare task id and its worker count of nodes x GPUs give way to the contract's."""
    environment = {"xgboost": {"n_workers": 10}}
    spec = load_spec("xgboost", environment)
    show = f"import json, os; print(json.dumps([os.environ.get(k) for k in {XGBOOST_VARIABLES!r}]))"
    plan = build_plan(spec, "train-1a2b", TrainJobAddressing(NAMESPACE), layout_for_kubernetes(None,
                      job_name="train-1a2b"), [sys.executable, "-c", show], backend="trainjob", launch=TRAINJOB_LAUNCH)
    argv = node_program(plan, JobManifestOptions(namespace=NAMESPACE, image="trainer:1", relay_output=False))
    body_env = {item["name"]: item["value"]
                for item in build(environment, framework="xgboost")["spec"]["trainer"]["env"]}
    env = {**body_env, "PATH": "/usr/bin:/bin", "JOB_COMPLETION_INDEX": str(rank), "DMLC_TRACKER_URI": TRACKER,
           "DMLC_TRACKER_PORT": "29500", "DMLC_TASK_ID": str(rank), "DMLC_NUM_WORKER": "22"}
    out = subprocess.run(argv, env=env, capture_output=True, text=True, check=True).stdout
    assert json.loads(out) == expected


HOSTILE_NAMESPACES = ["$(touch {marker})", "`touch {marker}`", "x}}; touch {marker}; : ${{x", "\"; touch {marker}; \"",
                      "'; touch {marker}; '"]


@pytest.mark.parametrize("framework", ["xgboost", "pytorch"])
@pytest.mark.parametrize("hostile", HOSTILE_NAMESPACES)
def test_a_hostile_namespace_in_the_node_prologue_is_never_run_by_sh(tmp_path, framework, hostile):
    """The prologue run by a real sh with the variables its TrainJob gives a node, under a runtime that leaves the
    tracker's address to the prologue's default (the tracker's DNS name holds the namespace): no command of the
    namespace runs, and the address reaches the training command as it is."""
    marker = tmp_path / "ran"
    namespace = hostile.format(marker=marker)
    spec = load_spec(framework, {framework: {"n_workers": 1}})
    show = "import json, os; print(json.dumps(os.environ.get('DMLC_TRACKER_URI')))"
    plan = build_plan(spec, "train-1a2b", TrainJobAddressing(namespace), layout_for_kubernetes(None,
                      job_name="train-1a2b"), [sys.executable, "-c", show], backend="trainjob", launch=TRAINJOB_LAUNCH)
    pods = JobManifestOptions(namespace=namespace, image="trainer:1", task_instance=TI, relay_output=False)
    body = build_trainjob(plan, TrainJobOptions(pods))
    env = {item["name"]: item["value"] for item in body["spec"]["trainer"]["env"]}
    env.update({"PATH": "/usr/bin:/bin", "JOB_COMPLETION_INDEX": "0"})
    out = subprocess.run(body["spec"]["trainer"]["command"], env=env, capture_output=True, text=True, check=True,
                         cwd=tmp_path).stdout
    assert not marker.exists()
    assert json.loads(out) == (plan.master.host if framework == "xgboost" else None)


def status_of(status: dict) -> JobStatus:
    jsonschema.Draft7Validator(SCHEMA).validate({"status": status})
    return trainjob_status({"status": status})


def condition(kind: str, status: str, reason: str, message: str = "") -> dict:
    return {"type": kind, "status": status, "reason": reason, "message": message,
            "lastTransitionTime": "2026-01-01T00:00:00Z"}


NODE_JOBS = [{"name": "node", "active": 1, "ready": 1, "succeeded": 0, "failed": 0, "suspended": 0}]
PROGRESS = {"progressPercentage": 45, "estimatedRemainingSeconds": 3600, "lastUpdatedTime": "2026-01-01T00:00:00Z",
            "metrics": [{"name": "loss", "value": "0.2347"}, {"name": "accuracy", "value": "0.9876"}]}


@pytest.mark.parametrize(("status", "expected"), [
    ({"conditions": [condition("Complete", "True", "AllJobsCompleted", "jobset completed successfully")]},
     JobStatus("succeeded", "AllJobsCompleted", "jobset completed successfully")),
    ({"conditions": [condition("Failed", "True", "DeadlineExceeded", "TrainJob exceeded its active deadline")]},
     JobStatus("failed", "DeadlineExceeded", "TrainJob exceeded its active deadline")),
    # Failed wins over a Complete written before it (a finished job's verdict is the failure).
    ({"conditions": [condition("Complete", "True", "AllJobsCompleted"), condition("Failed", "True", "FailedJobs")]},
     JobStatus("failed", "FailedJobs", "")),
    ({"conditions": [condition("Suspended", "True", "Suspended", "TrainJob is suspended")]},
     JobStatus("pending", "Suspended", "TrainJob is suspended")),
    ({"conditions": [condition("Suspended", "False", "Resumed", "TrainJob is resumed")]},
     JobStatus("pending", "Resumed", "TrainJob is resumed")),
    ({"conditions": [condition("Suspended", "False", "Resumed")], "jobsStatus": NODE_JOBS},
     JobStatus("running", "Running", "")),
    ({"jobsStatus": NODE_JOBS, "trainerStatus": PROGRESS},
     JobStatus("running", "Running", "45% done, about 1h00m left; loss=0.2347 accuracy=0.9876")),
    ({"trainerStatus": {"progressPercentage": 0, "lastUpdatedTime": "2026-01-01T00:00:00Z"}},
     JobStatus("pending", "", "0% done")),
], ids=["complete", "deadline", "failed-wins", "suspended", "resumed-no-nodes", "resumed-running", "progress",
        "progress-before-nodes"])
def test_the_state_of_a_trainjob_comes_from_its_conditions_and_nodes(status, expected):
    assert status_of(status) == expected


@pytest.mark.parametrize(("spec", "conditions", "expected"), [
    ({}, [], False),
    ({"suspend": True}, [], True),  # Kueue's webhook, before the controller says so
    ({}, [condition("Suspended", "True", "Suspended", "TrainJob is suspended")], True),
    ({"suspend": False}, [condition("Suspended", "False", "Resumed", "TrainJob is resumed")], False),
], ids=["nothing", "spec-only", "condition", "resumed"])
def test_a_trainjob_is_suspended_by_its_spec_or_a_true_suspended_condition(spec, conditions, expected):
    assert trainjob_suspended({"spec": spec, "status": {"conditions": conditions}}) is expected
    assert trainjob_suspended(None) is False


def test_no_status_yet_is_pending_and_has_no_progress():
    assert trainjob_status({}).state == "pending"
    assert trainer_progress({}) is None
    progress = trainer_progress({"status": {"trainerStatus": PROGRESS}})
    assert progress is not None and progress.as_dict() == {
        "progress_percentage": 45, "estimated_remaining_seconds": 3600,
        "metrics": {"loss": "0.2347", "accuracy": "0.9876"}, "last_updated_time": "2026-01-01T00:00:00Z"}


def test_node_0_is_found_by_jobsets_labels():
    assert node_selector("train-1a2b", rank=0) == ("jobset.sigs.k8s.io/jobset-name=train-1a2b,"
                                                   "jobset.sigs.k8s.io/replicatedjob-name in (launcher,node),"
                                                   "batch.kubernetes.io/job-completion-index=0")


def pod(replicated: str, index: int) -> dict:
    return {"metadata": {"name": f"j-{replicated}-0-{index}", "labels": {
        "jobset.sigs.k8s.io/replicatedjob-name": replicated, "batch.kubernetes.io/job-completion-index": str(index)}}}


def test_nodes_are_numbered_from_the_launcher_on_an_mpi_runtime_and_from_node_0_elsewhere():
    torch = [pod("node", 0), pod("node", 1), pod("node", 2)]
    mpi = [pod("launcher", 0), pod("node", 0), pod("node", 1)]
    assert [(r.role, r.index) for r in node_statuses(torch)] == [("master", 0), ("worker", 0), ("worker", 1)]
    assert [(r.role, r.index) for r in node_statuses(mpi)] == [("launcher", 0), ("worker", 0), ("worker", 1)]


def test_a_horovod_job_runs_its_launcher_on_the_named_mpi_runtime():
    environment = {"resources": {"gpu": {"requests": 4, "limits": 4}}, "replicas": {"n_workers": 3},
                   "node_selector": {"pool": "a100"}}
    assert trainjob_problems(load_spec("horovod", environment), "horovod-mpi") == []
    body = build(environment, framework="horovod", runtime="horovod-mpi")
    trainer = body["spec"]["trainer"]
    assert body["spec"]["runtimeRef"]["name"] == "horovod-mpi"
    assert (trainer["numNodes"], trainer["numProcPerNode"]) == (4, 4)  # the launcher is node 0; 4 GPUs, 4 slots
    assert trainer["command"][-7:] == ["horovodrun", "-np", "16", "--hostfile", "/etc/mpi/hostfile", "python",
                                       "train.py"]
    # The MPI plugin sets these four and its webhook refuses a TrainJob that sets them.
    assert not [e["name"] for e in trainer["env"] if e["name"].startswith("OMPI_MCA_")]
    replicated = body["spec"]["runtimePatches"][0]["trainingRuntimeSpec"]["template"]["spec"]["replicatedJobs"]
    assert [job["name"] for job in replicated] == ["launcher", "node"]
    assert [job["template"]["spec"]["template"]["spec"]["nodeSelector"] for job in replicated] == [{"pool": "a100"}] * 2


def test_the_launcher_starts_horovodrun_as_the_launcher_with_the_output_path(tmp_path):
    """The launcher's prologue run by a real sh, with a horovodrun on PATH that shows what it was given."""
    (tmp_path / "horovodrun").write_text('#!/bin/sh\necho "$AIRFLOW_DISTRIBUTED_ROLE $AIRFLOW_DISTRIBUTED_INDEX '
                                         '${AIRFLOW_DISTRIBUTED_OUTPUT:-none} $*"\n')
    (tmp_path / "horovodrun").chmod(0o755)
    spec = load_spec("horovod", {"replicas": {"n_workers": 2}})
    plan = build_plan(spec, "train-1a2b", TrainJobAddressing(NAMESPACE), layout_for_kubernetes(None,
                      job_name="train-1a2b"), ["python", "train.py"], backend="trainjob", launch=TRAINJOB_LAUNCH)
    argv = node_program(plan, JobManifestOptions(namespace=NAMESPACE, image="trainer:1", relay_output=False))
    body_env = {item["name"]: item["value"] for item in build({"replicas": {"n_workers": 2}}, framework="horovod",
                                                               runtime="horovod-mpi")["spec"]["trainer"]["env"]}
    env = {**body_env, "PATH": f"{tmp_path}:/usr/bin:/bin", "JOB_COMPLETION_INDEX": "0"}
    out = subprocess.run(argv, env=env, capture_output=True, text=True, check=True).stdout
    assert out.split() == ["launcher", "0", "/airflow/xcom/return.json", "-np", "3", "--hostfile",
                           "/etc/mpi/hostfile", "python", "train.py"]


@pytest.mark.parametrize(("framework", "environment", "path", "message"), [
    ("tensorflow", {"tensorflow": {"n_workers": 1}}, "backend", "TensorFlow has no Kubeflow Trainer v2 runtime"),
    ("mxnet", {}, "backend", "MXNet has no Kubeflow Trainer v2 runtime"),
    ("paddle", {}, "backend", "'paddle' is not mapped onto a Trainer v2 runtime yet"),
    ("horovod", {"replicas": {"n_workers": 1}}, "runtime", "which Kubeflow Trainer 2.3 does not ship: give runtime="),
    ("pytorch", {"config_map_refs": ["settings"]}, "environment.config_map_refs", "has no envFrom"),
    ("pytorch", {"pytorch": {"n_workers": 2, "elastic": {"min_workers": 2}}}, "environment.pytorch.elastic",
     "Kubeflow Trainer v2 has no elastic mode"),
    ("pytorch", {"security_context": {"runAsUser": 1, "privileged": True}}, "environment.security_context",
     "privileged apply to a container"),
    ("pytorch", {"pytorch": {"n_workers": 2, "worker": [{"index": 0, "labels": {"a": "b"}}]}},
     "environment.pytorch.worker[0]", "index 0 has settings of its own (labels)"),
])
def test_what_a_trainjob_cannot_express_is_named(framework, environment, path, message):
    problems = dict(trainjob_problems(load_spec(framework, environment)))
    assert path in problems and message in problems[path]


def test_a_spec_a_trainjob_can_express_has_no_problems():
    same = {"resources": {"cpu": {"requests": 1}}}
    environment = {**same, "pytorch": {"n_workers": 2, "default_worker": same, "worker": [{"index": 1, **same}]}}
    assert trainjob_problems(load_spec("pytorch", environment)) == []


def test_parsing_a_trainjob_dag_imports_neither_the_typed_models_nor_a_kubernetes_client():
    code = (
        "import sys, json, airflow.sdk\n"
        "before = set(sys.modules)\n"
        "from airflow_distributed.operators import DistributedTrainingOperator\n"
        "DistributedTrainingOperator(task_id='t', framework='pytorch', backend='trainjob', image='i:1',\n"
        "    command=['python', 'train.py'], environment={'resources': {'cpu': {'requests': 1}},\n"
        "    'security_context': {'runAsUser': 1}, 'pytorch': {'n_workers': 2, 'n_proc_per_node': 2}})\n"
        "heavy = ['kubeflow_trainer_api', 'kubernetes', 'kubernetes_asyncio']\n"
        "print(json.dumps([m for m in heavy if m in sys.modules and m not in before]))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], check=True, capture_output=True, text=True).stdout
    assert json.loads(out.strip().splitlines()[-1]) == []


def test_the_committed_schema_is_the_one_the_installed_typed_models_give():
    """Regenerate with tests/data/trainjob/generate_schema.py when kubeflow-trainer-api changes."""
    import importlib.util

    path = Path(__file__).resolve().parent.parent / "data" / "trainjob" / "generate_schema.py"
    module_spec = importlib.util.spec_from_file_location("generate_trainjob_schema", path)
    assert module_spec is not None and module_spec.loader is not None
    generator = importlib.util.module_from_spec(module_spec)
    module_spec.loader.exec_module(generator)
    assert generator.trainjob_schema() == SCHEMA


def test_the_horovod_runtime_of_the_docs_is_valid_for_the_typed_models_strict_schema():
    """The docs' ClusterTrainingRuntime, checked with the schema derived from the typed models as the TrainJob's is
    (unknown fields refused), so that the example a cluster copies is one Trainer 2.3 takes."""
    import importlib.util
    import re

    import yaml
    from kubeflow_trainer_api.models import TrainerV1alpha1ClusterTrainingRuntime

    path = Path(__file__).resolve().parent.parent / "data" / "trainjob" / "generate_schema.py"
    module_spec = importlib.util.spec_from_file_location("generate_trainjob_schema", path)
    assert module_spec is not None and module_spec.loader is not None
    generator = importlib.util.module_from_spec(module_spec)
    module_spec.loader.exec_module(generator)
    raw = TrainerV1alpha1ClusterTrainingRuntime.model_json_schema(by_alias=True)
    schema = generator._inline({k: v for k, v in raw.items() if k != "$defs"}, raw.get("$defs", {}))

    docs = (Path(__file__).resolve().parents[2] / "docs" / "trainjob.md").read_text()
    blocks = [yaml.safe_load(block) for block in re.findall(r"```yaml\n(.*?)```", docs, re.S)]
    runtime = next(b for b in blocks if b.get("kind") == "ClusterTrainingRuntime")
    jsonschema.Draft7Validator(schema).validate(runtime)
    mpi = runtime["spec"]["mlPolicy"]["mpi"]
    assert (mpi["mpiImplementation"], mpi["runLauncherAsNode"]) == ("OpenMPI", True)
    assert [job["name"] for job in runtime["spec"]["template"]["spec"]["replicatedJobs"]] == ["node", "launcher"]
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.Draft7Validator(schema).validate({**runtime, "spec": {**runtime["spec"], "mpiPolicy": {}}})


def test_nodes_of_several_processes_run_the_command_under_torchs_launcher_which_trainer_does_not_start():
    command = build({"pytorch": {"n_workers": 1, "n_proc_per_node": 3}})["spec"]["trainer"]["command"]
    # After the node program (which sets RANK and MASTER_* from Trainer's PET_*) and the output relay.
    assert command[-6:] == ["sh", "-c", 'export NODE_RANK="$RANK"; exec python3 -m torch.distributed.run --nnodes 2 '
                            '--node-rank "$RANK" --nproc-per-node 3 --master-addr "$MASTER_ADDR" --master-port '
                            '"$MASTER_PORT" --no-python "$@"', "sh", "python", "train.py"]
    one = build({"pytorch": {"n_workers": 1, "n_proc_per_node": 1}})["spec"]["trainer"]
    assert one["command"][-2:] == ["python", "train.py"] and "torch.distributed.run" not in " ".join(one["command"])

"""The frameworks read how a backend launches the replicas (``launch.Launch``, on the plan), never its name: a new
backend states its facts in a record and touches no framework module.

Each case builds a plan for a backend no framework knows the name of, with one fact set, and checks what that fact
decides: the variables, files and command the known backends' records give (the manifests' dump and the frameworks'
tests check those records' plans are unchanged).
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from airflow_distributed.backends.registry import REGISTRY
from airflow_distributed.launch import Launch, Operator
from airflow_distributed.plan import KubernetesAddressing, Layout, LocalAddressing, build_plan
from airflow_distributed.spec import load_spec

FRAMEWORKS = Path(__file__).resolve().parents[2] / "airflow_distributed" / "frameworks"
LAYOUT = Layout("/m", "/o.json", "/f")
#: A backend name no module of the package knows.
ELSEWHERE = "elsewhere"


def _plan(framework: str, environment: dict, launch: Launch, addressing=None):
    spec = load_spec(framework, environment)
    addressing = addressing or KubernetesAddressing("ns")
    return build_plan(spec, "job", addressing, LAYOUT, ["python", "t.py"], backend=ELSEWHERE, launch=launch)


def test_no_framework_module_reads_or_names_a_backend():
    found = []
    for path in sorted(FRAMEWORKS.glob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Attribute) and node.attr == "backend":
                found.append(f"{path.name}:{node.lineno} reads .backend")
            elif isinstance(node, ast.arg) and node.arg == "backend":
                found.append(f"{path.name}:{node.lineno} takes a backend argument")
            elif isinstance(node, ast.Constant) and node.value in REGISTRY:
                found.append(f"{path.name}:{node.lineno} names {node.value!r}")
    assert found == []


HOROVOD = {"resources": {"gpu": {"limits": 2}},
           "replicas": {"n_workers": 2, "default_worker": {"resources": {"gpu": {"limits": 3}}}}}


def test_replicas_on_one_host_share_one_hostfile_line_and_need_no_ssh():
    plan = _plan("horovod", HOROVOD, Launch(shared_host=True), LocalAddressing(ports=[1, 2, 3]))
    assert plan.files["hostfile"] == "localhost slots=8\n"
    assert plan.master.command == ("horovodrun", "--gloo", "-np", "8", "--hostfile", "/f/hostfile", "python", "t.py")
    assert plan.replicas[1].env["OMPI_MCA_orte_default_hostfile"] == "/f/hostfile"


def test_replicas_on_their_own_hosts_each_get_a_line_and_are_reached_over_ssh():
    plan = _plan("horovod", HOROVOD, Launch(pods=True))
    assert plan.files["hostfile"].splitlines() == [
        "job-launcher-0.job.ns.svc slots=2", "job-worker-0.job.ns.svc slots=3", "job-worker-1.job.ns.svc slots=3"]
    assert plan.master.command[-4:] == ("-p", "22", "python", "t.py")


def test_an_mpi_runtime_that_writes_the_hostfile_gets_none_and_decides_controller_and_port():
    plan = _plan("horovod", HOROVOD, Launch(operator=Operator.TRAINER, mpi_hostfile="/etc/x/hosts",
                                            nodes_like_master=True))
    assert "hostfile" not in plan.files
    # Every node runs from the master's settings: 3 nodes of 2 slots, whatever the workers' own resources say.
    assert plan.master.command == ("horovodrun", "-np", "6", "--hostfile", "/etc/x/hosts", "python", "t.py")
    assert "OMPI_MCA_orte_default_hostfile" not in plan.master.env


@pytest.mark.parametrize(("pods", "expected", "absent"), [
    (True, {"DMLC_USE_KUBERNETES": "1"}, {"DMLC_INTERFACE", "DMLC_NODE_HOST"}),
    (False, {"DMLC_INTERFACE": "lo", "DMLC_NODE_HOST": "job-worker-0.job.ns.svc"}, {"DMLC_USE_KUBERNETES"}),
])
def test_mxnet_finds_its_network_itself_only_in_pods(pods, expected, absent):
    worker = _plan("mxnet", {"mxnet": {"n_workers": 1, "n_ps": 1}}, Launch(pods=pods)).replica("job-worker-0")
    assert {name: worker.env.get(name) for name in expected} == expected
    assert not absent & set(worker.env)


#: What each framework adds beside a training operator, by the operator's conventions (``Framework.kept_env``).
KEPT = [
    ("pytorch", {"pytorch": {"n_workers": 1}}, Operator.TRAINING_OPERATOR, {"LOCAL_RANK"}),
    ("pytorch", {"pytorch": {"n_workers": 1}}, Operator.TRAINER, set()),
    ("xgboost", {"xgboost": {"n_workers": 1}}, Operator.TRAINING_OPERATOR,
     {"DMLC_TRACKER_URI", "DMLC_TRACKER_PORT", "DMLC_TASK_ID", "DMLC_NUM_WORKER"}),
    ("xgboost", {"xgboost": {"n_workers": 1}}, Operator.TRAINER, set()),
    ("paddle", {"paddle": {"n_workers": 1}}, Operator.TRAINING_OPERATOR,
     {"PADDLE_TRAINER_ENDPOINTS", "PADDLE_CURRENT_ENDPOINT", "PADDLE_TRAINER_ID", "PADDLE_TRAINERS_NUM"}),
    ("paddle", {"paddle": {"n_workers": 1}}, Operator.TRAINER, set()),
    ("tensorflow", {"tensorflow": {"n_workers": 1}}, Operator.TRAINING_OPERATOR, set()),
    ("jax", {"jax": {"n_workers": 1}}, Operator.TRAINER, set()),
]


@pytest.mark.parametrize(("framework", "environment", "operator", "kept"), KEPT,
                         ids=[f"{case[0]}-{case[2].name}" for case in KEPT])
def test_an_operator_gets_only_the_variables_its_conventions_leave_out(framework, environment, operator, kept):
    own = _plan(framework, environment, Launch(pods=True)).replicas[1].env
    beside = _plan(framework, environment, Launch(operator=operator, pods=True)).replicas[1].env
    contract = {name for name in own if name.startswith("AIRFLOW_DISTRIBUTED_") or name == "PYTHONUNBUFFERED"}
    assert set(beside) - contract == kept
    assert {name: beside[name] for name in kept} == {name: own[name] for name in kept}

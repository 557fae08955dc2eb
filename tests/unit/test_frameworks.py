"""Each framework's variables, per CONTRACT.md, for every replica of a job; table-driven."""

from __future__ import annotations

import base64
import json
from dataclasses import dataclass

import pytest

from airflow_distributed.manifests.kubeflow import KUBEFLOW_LAUNCH
from airflow_distributed.manifests.kubernetes import POD_LAUNCH
from airflow_distributed.manifests.local import LOCAL_LAUNCH, process_specs
from airflow_distributed.manifests.trainjob import TRAINJOB_LAUNCH
from airflow_distributed.naming import job_name
from airflow_distributed.plan import KubernetesAddressing, Layout, LocalAddressing, build_plan
from airflow_distributed.replica.world_size import replica_gpus, world_size_problem
from airflow_distributed.spec import load_spec

LAYOUT = Layout(model_dir="/m", output_path="/o/output.json", files_dir="/f")
PORTS = LocalAddressing(ports=range(31000, 31020))


@dataclass(frozen=True)
class EnvCase:
    name: str
    framework: str
    environment: dict
    replica: str  # suffix after the job name
    expected: dict[str, str]


CASES = [
    EnvCase("pytorch master", "pytorch", {"pytorch": {"n_workers": 2}}, "master-0",
            {"MASTER_ADDR": "127.0.0.1", "MASTER_PORT": "31000", "WORLD_SIZE": "3", "RANK": "0",
             "PET_MASTER_ADDR": "127.0.0.1", "PET_MASTER_PORT": "31000", "PET_NNODES": "3", "PET_NODE_RANK": "0",
             "PET_NPROC_PER_NODE": "1"}),
    EnvCase("pytorch worker 1 is rank 2", "pytorch", {"pytorch": {"n_workers": 2}}, "worker-1",
            {"MASTER_ADDR": "127.0.0.1", "MASTER_PORT": "31000", "WORLD_SIZE": "3", "RANK": "2",
             "PET_NODE_RANK": "2"}),
    EnvCase("mxnet scheduler", "mxnet", {"mxnet": {"n_workers": 2, "n_ps": 1}}, "scheduler-0",
            {"DMLC_ROLE": "scheduler", "DMLC_PS_ROOT_URI": "127.0.0.1", "DMLC_PS_ROOT_PORT": "31000",
             "DMLC_NUM_SERVER": "1", "DMLC_NUM_WORKER": "2"}),
    EnvCase("mxnet server", "mxnet", {"mxnet": {"n_workers": 2, "n_ps": 1}}, "server-0",
            {"DMLC_ROLE": "server", "DMLC_SERVER_ID": "0", "DMLC_NUM_SERVER": "1", "DMLC_NUM_WORKER": "2"}),
    EnvCase("mxnet worker", "mxnet", {"mxnet": {"n_workers": 2, "n_ps": 1}}, "worker-1",
            {"DMLC_ROLE": "worker", "DMLC_WORKER_ID": "1", "DMLC_PS_ROOT_PORT": "31000"}),
    EnvCase("jax master is process 0 and the coordinator", "jax", {"jax": {"n_workers": 2}}, "master-0",
            {"JAX_COORDINATOR_ADDRESS": "127.0.0.1:31000", "JAX_NUM_PROCESSES": "3", "JAX_PROCESS_ID": "0"}),
    EnvCase("jax worker 1 is process 2", "jax", {"jax": {"n_workers": 2}}, "worker-1",
            {"JAX_COORDINATOR_ADDRESS": "127.0.0.1:31000", "JAX_NUM_PROCESSES": "3", "JAX_PROCESS_ID": "2"}),
    EnvCase("jax master alone", "jax", None, "master-0",
            {"JAX_COORDINATOR_ADDRESS": "127.0.0.1:31000", "JAX_NUM_PROCESSES": "1", "JAX_PROCESS_ID": "0"}),
    EnvCase("xgboost master runs the tracker and is rank 0", "xgboost", {"xgboost": {"n_workers": 2}}, "master-0",
            {"DMLC_TRACKER_URI": "127.0.0.1", "DMLC_TRACKER_PORT": "31000", "DMLC_TASK_ID": "0",
             "DMLC_NUM_WORKER": "3", "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": "31000", "WORLD_SIZE": "3",
             "RANK": "0"}),
    EnvCase("xgboost worker 1 is rank 2", "xgboost", {"xgboost": {"n_workers": 2}}, "worker-1",
            {"DMLC_TRACKER_URI": "127.0.0.1", "DMLC_TRACKER_PORT": "31000", "DMLC_TASK_ID": "2",
             "DMLC_NUM_WORKER": "3", "RANK": "2"}),
    EnvCase("xgboost task ids padded to the widest rank", "xgboost", {"xgboost": {"n_workers": 10}}, "worker-2",
            {"DMLC_TASK_ID": "03", "DMLC_NUM_WORKER": "11", "RANK": "3"}),
    EnvCase("paddle master is trainer 0", "paddle", {"paddle": {"n_workers": 2}}, "master-0",
            {"PADDLE_TRAINER_ENDPOINTS": "127.0.0.1:31000,127.0.0.1:31001,127.0.0.1:31002",
             "PADDLE_CURRENT_ENDPOINT": "127.0.0.1:31000", "PADDLE_TRAINER_ID": "0", "PADDLE_TRAINERS_NUM": "3"}),
    EnvCase("paddle worker 1 is trainer 2", "paddle", {"paddle": {"n_workers": 2}}, "worker-1",
            {"PADDLE_TRAINER_ENDPOINTS": "127.0.0.1:31000,127.0.0.1:31001,127.0.0.1:31002",
             "PADDLE_CURRENT_ENDPOINT": "127.0.0.1:31002", "PADDLE_TRAINER_ID": "2", "PADDLE_TRAINERS_NUM": "3"}),
    # Parameter-server mode (n_ps >= 1): plan order master, pservers, workers, so ports 31000, 31001-2, 31003-4.
    EnvCase("paddle ps mode: master is trainer 0", "paddle", {"paddle": {"n_workers": 2, "n_ps": 2}}, "master-0",
            {"TRAINING_ROLE": "TRAINER", "PADDLE_ROLE": "TRAINER", "PADDLE_TRAINER_ID": "0",
             "PADDLE_PSERVERS_IP_PORT_LIST": "127.0.0.1:31001,127.0.0.1:31002",
             "PADDLE_TRAINER_ENDPOINTS": "127.0.0.1:31000,127.0.0.1:31003,127.0.0.1:31004",
             "PADDLE_TRAINERS_NUM": "3", "POD_IP": "127.0.0.1", "PADDLE_PORT": "31000",
             "PADDLE_CURRENT_ENDPOINT": None}),
    EnvCase("paddle ps mode: pserver 1 serves on its own endpoint", "paddle",
            {"paddle": {"n_workers": 2, "n_ps": 2}}, "pserver-1",
            {"TRAINING_ROLE": "PSERVER", "PADDLE_ROLE": "PSERVER", "PADDLE_TRAINER_ID": None,
             "PADDLE_PSERVERS_IP_PORT_LIST": "127.0.0.1:31001,127.0.0.1:31002",
             "PADDLE_TRAINERS_NUM": "3", "POD_IP": "127.0.0.1", "PADDLE_PORT": "31002"}),
    EnvCase("paddle ps mode: worker 1 is trainer 2", "paddle", {"paddle": {"n_workers": 2, "n_ps": 2}}, "worker-1",
            {"TRAINING_ROLE": "TRAINER", "PADDLE_TRAINER_ID": "2", "PADDLE_TRAINERS_NUM": "3",
             "POD_IP": "127.0.0.1", "PADDLE_PORT": "31004"}),
    EnvCase("paddle ps mode: master alone with one pserver", "paddle", {"paddle": {"n_ps": 1}}, "master-0",
            {"TRAINING_ROLE": "TRAINER", "PADDLE_TRAINER_ID": "0", "PADDLE_TRAINERS_NUM": "1",
             "PADDLE_PSERVERS_IP_PORT_LIST": "127.0.0.1:31001", "PADDLE_TRAINER_ENDPOINTS": "127.0.0.1:31000"}),
    EnvCase("paddle collective mode has no ps variables", "paddle", {"paddle": {"n_workers": 1, "n_ps": 0}},
            "worker-0", {"PADDLE_TRAINER_ID": "1", "TRAINING_ROLE": None, "PADDLE_PSERVERS_IP_PORT_LIST": None,
                         "POD_IP": None, "PADDLE_PORT": None}),
    EnvCase("horovod hostfile", "horovod", {"replicas": {"n_workers": 2}}, "worker-0",
            {"OMPI_MCA_orte_default_hostfile": "/f/hostfile"}),
]


def _plan(framework, environment, addressing=PORTS, backend="local"):
    spec = load_spec(framework, environment)
    launch = {"local": LOCAL_LAUNCH, "kubernetes": POD_LAUNCH, "kubeflow": KUBEFLOW_LAUNCH,
              "trainjob": TRAINJOB_LAUNCH}[backend]
    return build_plan(spec, "job", addressing, LAYOUT, ["python", "train.py"], backend=backend, launch=launch,
                      env={"A": "1"})


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_framework_variables(case: EnvCase):
    replica = _plan(case.framework, case.environment).replica(f"job-{case.replica}")
    assert {k: replica.env.get(k) for k in case.expected} == case.expected
    assert replica.env["AIRFLOW_DISTRIBUTED_JOB"] == "job"
    assert replica.env["PYTHONUNBUFFERED"] == "1"
    assert replica.env["A"] == "1"


def test_tf_config_per_replica_leaves_out_empty_roles():
    plan = _plan("tensorflow", {"tensorflow": {"n_workers": 2}})
    configs = {r.name: json.loads(r.env["TF_CONFIG"]) for r in plan.replicas}
    assert configs["job-worker-1"] == {
        "cluster": {"chief": ["127.0.0.1:31000"], "worker": ["127.0.0.1:31001", "127.0.0.1:31002"]},
        "task": {"type": "worker", "index": 1},
        "environment": "cloud",
    }
    assert configs["job-chief-0"]["task"] == {"type": "chief", "index": 0}


def test_kubernetes_addresses_are_stable_dns_names():
    plan = _plan("tensorflow", {"tensorflow": {"n_workers": 1, "n_ps": 1}}, KubernetesAddressing("team-a"),
                 backend="kubernetes")
    cluster = json.loads(plan.master.env["TF_CONFIG"])["cluster"]
    assert cluster == {
        "chief": ["job-chief-0.job.team-a.svc:2222"],
        "ps": ["job-ps-0.job.team-a.svc:2222"],
        "worker": ["job-worker-0.job.team-a.svc:2222"],
    }
    mxnet = _plan("mxnet", {"mxnet": {"n_workers": 1, "n_ps": 1}}, KubernetesAddressing("ns"), backend="kubernetes")
    assert mxnet.replica("job-worker-0").env["DMLC_USE_KUBERNETES"] == "1"
    assert mxnet.replica("job-worker-0").env["DMLC_PS_ROOT_URI"] == "job-scheduler-0.job.ns.svc"


def test_horovod_launcher_runs_command_under_horovodrun_and_workers_stand_by():
    env = {"replicas": {"n_workers": 2, "worker": [{"index": 1, "resources": {"gpu": {"requests": 2, "limits": 2}}}]}}
    local = _plan("horovod", env)
    assert local.master.command == ("horovodrun", "--gloo", "-np", "4", "--hostfile", "/f/hostfile",
                                    "python", "train.py")
    assert [r.command for r in local.replicas[1:]] == [None, None]
    assert local.files == {"hostfile": "localhost slots=4\n"}
    k8s = _plan("horovod", env, KubernetesAddressing("ns"), backend="kubernetes")
    assert k8s.files["hostfile"].splitlines() == [
        "job-launcher-0.job.ns.svc slots=1", "job-worker-0.job.ns.svc slots=1", "job-worker-1.job.ns.svc slots=2"
    ]


def test_contract_variables_win_over_user_variables():
    worker_env = {"env_vars": [["RANK", "9"], ["B", "2"]]}
    spec = load_spec("pytorch", {"pytorch": {"n_workers": 1, "default_worker": worker_env}})
    plan = build_plan(spec, "job", PORTS, LAYOUT, ["x"],
                      backend="local", launch=LOCAL_LAUNCH, env={"WORLD_SIZE": "7", "C": "3"})
    worker = plan.replica("job-worker-0")
    assert (worker.env["RANK"], worker.env["WORLD_SIZE"], worker.env["B"], worker.env["C"]) == ("1", "2", "2", "3")


@pytest.mark.parametrize(
    ("dag_id", "task_id", "run_id", "map_index"),
    [
        ("dag", "train", "manual__2026-11-21T20:14:30.689650+00:00", -1),
        ("d", "9_Group.Sub__Task_With_A_Very_Long_Name_That_Goes_On_And_On", "scheduled__x", 1234),
        ("d", "___", "r", -1),
    ],
)
def test_job_names_are_deterministic_dns_labels(dag_id, task_id, run_id, map_index):
    name = job_name(dag_id, task_id, run_id, map_index)
    assert name == job_name(dag_id, task_id, run_id, map_index)
    assert name != job_name(dag_id, task_id, run_id + "x", map_index)
    assert name != job_name(dag_id, task_id, run_id, map_index + 1)
    assert len(name) <= 40 and name[0].isalpha() and name[-1].isalnum()
    assert all(c.islower() or c.isdigit() or c == "-" for c in name)
    assert len(f"{name}-scheduler-1999") <= 63


@dataclass(frozen=True)
class SectionCase:
    name: str
    framework: str | None
    environment: dict
    #: (replica suffix, process/rank variable) in plan order
    replicas: list[tuple[str, str]]
    #: replica suffix -> cpu limit of its effective settings
    cpu_limits: dict[str, object] | None = None


SECTION_CASES = [
    SectionCase("jax inferred from its section", None, {"jax": {"n_workers": 2}},
                [("master-0", "0"), ("worker-0", "1"), ("worker-1", "2")]),
    SectionCase("jax default and indexed worker", "jax",
                {"resources": {"cpu": {"limits": 4}},
                 "jax": {"n_workers": 3, "default_worker": {"resources": {"cpu": {"limits": 2}}},
                         "worker": [{"index": 1, "resources": {"cpu": {"limits": 1}}}]}},
                [("master-0", "0"), ("worker-0", "1"), ("worker-1", "2"), ("worker-2", "3")],
                {"master-0": 4, "worker-0": 2, "worker-1": 1, "worker-2": 2}),
    SectionCase("jax legacy worker_resources", "jax",
                {"jax": {"n_workers": 2, "worker_resources": [{"index": 0, "cpu": {"limits": 3}}]}},
                [("master-0", "0"), ("worker-0", "1"), ("worker-1", "2")], {"worker-0": 3, "worker-1": None}),
    SectionCase("xgboost inferred from its section", None, {"xgboost": {"n_workers": 2}},
                [("master-0", "0"), ("worker-0", "1"), ("worker-1", "2")]),
    SectionCase("xgboost default and indexed worker", "xgboost",
                {"xgboost": {"n_workers": 2, "default_worker": {"resources": {"cpu": {"limits": 2}}},
                             "worker": [{"index": 0, "resources": {"cpu": {"limits": 1}}}]}},
                [("master-0", "0"), ("worker-0", "1"), ("worker-1", "2")],
                {"master-0": None, "worker-0": 1, "worker-1": 2}),
    SectionCase("xgboost master alone", "xgboost", {}, [("master-0", "0")]),
    SectionCase("paddle inferred from its section", None, {"paddle": {"n_workers": 3}},
                [("master-0", "0"), ("worker-0", "1"), ("worker-1", "2"), ("worker-2", "3")]),
    SectionCase("paddle ps mode numbers trainers only", "paddle",
                {"paddle": {"n_workers": 2, "n_ps": 1, "default_ps": {"resources": {"cpu": {"limits": 4}}},
                            "ps_resources": [{"index": 0, "cpu": {"limits": 3}}]}},
                [("master-0", "0"), ("pserver-0", None), ("worker-0", "1"), ("worker-1", "2")],
                {"master-0": None, "pserver-0": 3, "worker-0": None}),
    SectionCase("paddle legacy default_worker_resources", "paddle",
                {"paddle": {"n_workers": 1, "default_worker_resources": {"cpu": {"limits": 2}}}},
                [("master-0", "0"), ("worker-0", "1")], {"master-0": None, "worker-0": 2}),
]
PROCESS_VARIABLE = {"jax": "JAX_PROCESS_ID", "xgboost": "DMLC_TASK_ID", "paddle": "PADDLE_TRAINER_ID"}


@pytest.mark.parametrize("case", SECTION_CASES, ids=[c.name for c in SECTION_CASES])
def test_framework_sections_load_and_number_every_process(case: SectionCase):
    spec = load_spec(case.framework, case.environment)
    plan = build_plan(spec, "job", LocalAddressing(ports=range(32000, 32010)), LAYOUT, ["x"],
                      backend="local", launch=LOCAL_LAUNCH)
    variable = PROCESS_VARIABLE[spec.framework]
    assert [(r.name.removeprefix("job-"), r.env.get(variable)) for r in plan.replicas] == case.replicas
    for suffix, limit in (case.cpu_limits or {}).items():
        resources = plan.replica(f"job-{suffix}").resources
        assert (resources.cpu.limits if resources and resources.cpu else None) == limit, suffix


def test_jax_coordinator_is_the_masters_stable_dns_name_on_kubernetes():
    plan = _plan("jax", {"jax": {"n_workers": 2}}, KubernetesAddressing("ns"), backend="kubernetes")
    assert {r.env["JAX_COORDINATOR_ADDRESS"] for r in plan.replicas} == {"job-master-0.job.ns.svc:6666"}
    assert plan.cluster == {"master": ["job-master-0.job.ns.svc:6666"],
                            "worker": ["job-worker-0.job.ns.svc:6666", "job-worker-1.job.ns.svc:6666"]}


@pytest.mark.parametrize("n_workers", [0, 1, 8, 9, 10, 99, 100, 1000])
def test_xgboost_task_ids_sort_as_strings_in_rank_order(n_workers):
    # XGBoost's tracker (sortby="task") ranks workers by their task ids compared as strings.
    plan = _plan("xgboost", {"xgboost": {"n_workers": n_workers}}, LocalAddressing(ports=range(n_workers + 1)))
    ids = [replica.env["DMLC_TASK_ID"] for replica in plan.replicas]
    assert sorted(ids) == ids and [int(i) for i in ids] == list(range(n_workers + 1))


def test_xgboost_tracker_is_the_masters_stable_dns_name_on_kubernetes():
    plan = _plan("xgboost", {"xgboost": {"n_workers": 1}}, KubernetesAddressing("ns"), backend="kubernetes")
    assert {(r.env["DMLC_TRACKER_URI"], r.env["DMLC_TRACKER_PORT"]) for r in plan.replicas} == {
        ("job-master-0.job.ns.svc", "9999")}


def test_paddle_endpoints_are_every_trainer_in_id_order_on_kubernetes():
    plan = _plan("paddle", {"paddle": {"n_workers": 2}}, KubernetesAddressing("ns"), backend="kubernetes")
    endpoints = ["job-master-0.job.ns.svc:36543", "job-worker-0.job.ns.svc:36543", "job-worker-1.job.ns.svc:36543"]
    for replica in plan.replicas:
        assert replica.env["PADDLE_TRAINER_ENDPOINTS"].split(",") == endpoints
        assert endpoints[int(replica.env["PADDLE_TRAINER_ID"])] == replica.env["PADDLE_CURRENT_ENDPOINT"]


def test_paddle_ps_endpoints_are_stable_dns_names_on_kubernetes():
    plan = _plan("paddle", {"paddle": {"n_workers": 1, "n_ps": 2}}, KubernetesAddressing("ns"), backend="kubernetes")
    pservers = "job-pserver-0.job.ns.svc:36543,job-pserver-1.job.ns.svc:36543"
    assert {r.env["PADDLE_PSERVERS_IP_PORT_LIST"] for r in plan.replicas} == {pservers}
    # A pserver's id is the position of POD_IP:PADDLE_PORT in the list, so its own entry must be spelt the same.
    for replica in plan.replicas:
        assert f"{replica.env['POD_IP']}:{replica.env['PADDLE_PORT']}" == replica.address
    assert plan.cluster == {"master": ["job-master-0.job.ns.svc:36543"],
                            "pserver": pservers.split(","), "worker": ["job-worker-0.job.ns.svc:36543"]}


def test_pytorch_replicas_with_several_processes_run_the_command_under_torchrun_with_a_fixed_topology():
    plan = _plan("pytorch", {"pytorch": {"n_workers": 1, "n_proc_per_node": 3}})
    assert plan.processes_per_replica == 3
    assert [r.command for r in plan.replicas] == [
        ("python3", "-m", "torch.distributed.run", "--nnodes", "2", "--node-rank", str(rank), "--nproc-per-node", "3",
         "--master-addr", "127.0.0.1", "--master-port", "31000", "--no-python",
         # each process checks torchrun's WORLD_SIZE against the plan's before it trains
         "python", "-m", "airflow_distributed.replica.world_size", "python", "train.py")
        for rank in (0, 1)
    ]
    worker = plan.replica("job-worker-0").env
    keys = ("NODE_RANK", "PET_NODE_RANK", "PET_NNODES", "PET_NPROC_PER_NODE", "AIRFLOW_DISTRIBUTED_WORLD_SIZE")
    assert {key: worker[key] for key in keys} == {"NODE_RANK": "1", "PET_NODE_RANK": "1", "PET_NNODES": "2",
                                                  "PET_NPROC_PER_NODE": "3", "AIRFLOW_DISTRIBUTED_WORLD_SIZE": "6"}
    k8s = _plan("pytorch", {"pytorch": {"n_workers": 1, "n_proc_per_node": 3}}, KubernetesAddressing("ns"),
                backend="kubernetes")
    assert k8s.replicas[1].command[9:13] == ("--master-addr", "job-master-0.job.ns.svc", "--master-port", "23456")


def test_one_process_per_replica_leaves_the_pytorch_plan_as_it_was():
    given = _plan("pytorch", {"pytorch": {"n_workers": 1, "n_proc_per_node": 1}})
    default = _plan("pytorch", {"pytorch": {"n_workers": 1}})
    assert [(r.command, dict(r.env)) for r in given.replicas] == [(r.command, dict(r.env)) for r in default.replicas]
    assert default.master.command == ("python", "train.py") and "NODE_RANK" not in default.master.env


@pytest.mark.parametrize("gpus, expected", [(None, 1), (4, 4)])
def test_auto_processes_are_the_gpus_each_replica_asks_for_else_one(gpus, expected):
    resources = {"resources": {"gpu": {"limits": gpus}}} if gpus else {}
    environment = {**resources, "pytorch": {"n_workers": 1, "n_proc_per_node": "auto", "default_worker": resources}}
    assert _plan("pytorch", environment).processes_per_replica == expected


@pytest.mark.parametrize("command", [["torchrun", "--standalone", "train.py"],
                                     ["python", "-m", "torch.distributed.run", "train.py"]])
def test_a_command_that_starts_torchrun_itself_is_not_wrapped_again(command):
    spec = load_spec("pytorch", {"pytorch": {"n_workers": 1, "n_proc_per_node": 2}})
    plan = build_plan(spec, "job", PORTS, LAYOUT, command, backend="local", launch=LOCAL_LAUNCH)
    assert plan.master.command == tuple(command)
    assert plan.master.env["PET_NPROC_PER_NODE"] == "2"


@pytest.mark.parametrize("backend", ["kubeflow", "trainjob"])
def test_under_a_training_operator_every_pod_of_a_role_runs_one_launch_line_reading_its_node_rank_when_it_runs(
        backend):
    plan = _plan("pytorch", {"pytorch": {"n_workers": 2, "n_proc_per_node": 3}}, KubernetesAddressing("ns"),
                 backend=backend)
    launch = ('export NODE_RANK="$RANK"; exec python3 -m torch.distributed.run --nnodes 3 --node-rank "$RANK" '
              '--nproc-per-node 3 --master-addr "$MASTER_ADDR" --master-port "$MASTER_PORT" --no-python "$@"')
    assert {r.command for r in plan.replicas} == {("sh", "-c", launch, "sh", "python", "train.py")}


def test_elastic_replicas_start_the_processes_asked_for_under_their_agent():
    plan = _plan("pytorch", {"pytorch": {"n_workers": 1, "n_proc_per_node": 2, "elastic": {"max_restarts": 1}}})
    command = plan.master.command
    assert command[command.index("--nproc-per-node") + 1] == "2" and "--node-rank" not in command
    assert plan.master.env["PET_NPROC_PER_NODE"] == "2" and "NODE_RANK" not in plan.master.env


def test_deepspeeds_launcher_gets_every_node_and_its_slots_in_rank_order_and_this_nodes_rank():
    plan = _plan("pytorch", {"pytorch": {"n_workers": 2, "n_proc_per_node": 2, "launcher": "deepspeed"}},
                 KubernetesAddressing("ns"), backend="kubernetes")
    for node_rank, replica in enumerate(plan.replicas):
        head, checked = replica.command[:9], replica.command[9:]
        assert head[:4] == ("python3", "-u", "-m", "deepspeed.launcher.launch")
        world_info = json.loads(base64.urlsafe_b64decode(head[4].removeprefix("--world_info=")))
        # DeepSpeed numbers the processes node by node in the order of the keys: the master's first.
        assert list(world_info.items()) == [(name, [0, 1]) for name in ("job-master-0", "job-worker-0",
                                                                         "job-worker-1")]
        assert head[5:] == (f"--node_rank={node_rank}", "--master_addr=job-master-0.job.ns.svc",
                            "--master_port=23456", "--no_python")
        assert checked == ("--no_local_rank", "python", "-m", "airflow_distributed.replica.world_size", "python",
                           "train.py")
        assert (replica.env["AIRFLOW_DISTRIBUTED_WORLD_SIZE"], replica.env["NODE_RANK"]) == ("6", str(node_rank))


def test_accelerate_is_told_the_whole_jobs_process_count_and_never_cpu():
    plan = _plan("pytorch", {"pytorch": {"n_workers": 1, "n_proc_per_node": 3, "launcher": "accelerate"}})
    worker = plan.replica("job-worker-0")
    # --num_processes is every machine's together: Accelerate divides it by --num_machines.
    assert worker.command == (
        "python3", "-m", "accelerate.commands.launch", "--multi_gpu", "--num_machines", "2", "--machine_rank", "1",
        "--num_processes", "6", "--main_process_ip", "127.0.0.1", "--main_process_port", "31000", "--same_network",
        "--max_restarts", "0", "--no_python", "python", "-m", "airflow_distributed.replica.world_size", "python",
        "train.py")


def test_a_launcher_named_for_one_process_per_replica_still_wraps_the_command():
    plan = _plan("pytorch", {"pytorch": {"n_workers": 1, "launcher": "torchrun"}})
    assert plan.master.command[:2] == ("python3", "-m") and "--nproc-per-node" in plan.master.command
    assert plan.master.env["AIRFLOW_DISTRIBUTED_WORLD_SIZE"] == "2"


@pytest.mark.parametrize("backend", ["kubeflow", "trainjob"])
def test_no_launcher_wraps_the_command_where_an_operator_starts_the_processes(backend):
    plan = _plan("pytorch", {"pytorch": {"n_workers": 1, "launcher": "torchrun"}}, KubernetesAddressing("ns"),
                 backend=backend)
    assert plan.master.command == ("python", "train.py") and "AIRFLOW_DISTRIBUTED_WORLD_SIZE" not in plan.master.env


@pytest.mark.parametrize("command", [["accelerate", "launch", "train.py"], ["deepspeed", "train.py"],
                                     ["python", "-m", "deepspeed.launcher.launch", "train.py"]])
def test_a_command_that_starts_a_launcher_itself_is_not_wrapped_again(command):
    spec = load_spec("pytorch", {"pytorch": {"n_workers": 1, "launcher": "deepspeed"}})
    assert build_plan(spec, "job", PORTS, LAYOUT, command, backend="local",
                      launch=LOCAL_LAUNCH).master.command == tuple(command)


def test_a_command_no_python_runs_goes_unchecked():
    spec = load_spec("pytorch", {"pytorch": {"n_workers": 1, "n_proc_per_node": 2}})
    command = build_plan(spec, "job", PORTS, LAYOUT, ["/opt/train.sh", "--fast"], backend="local",
                         launch=LOCAL_LAUNCH).master.command
    assert command[-3:] == ("--no-python", "/opt/train.sh", "--fast")


@pytest.mark.parametrize("environ, problem", [
    ({"AIRFLOW_DISTRIBUTED_WORLD_SIZE": "4", "WORLD_SIZE": "4"}, None),
    ({"WORLD_SIZE": "1"}, None),
    ({"AIRFLOW_DISTRIBUTED_WORLD_SIZE": "4", "WORLD_SIZE": "2"}, "with world size 2, but the job was planned at "
                                                                 "world size 4"),
    ({"AIRFLOW_DISTRIBUTED_WORLD_SIZE": "4"}, "with no WORLD_SIZE (a process on its own, world size 1), but the job "
                                              "was planned at world size 4"),
])
def test_the_world_size_check_names_what_the_launcher_gave_and_what_was_planned(environ, problem):
    found = world_size_problem(environ)
    assert found == problem if problem is None else problem in found


@pytest.mark.parametrize("environ, gpus", [
    # DeepSpeed's launcher set its slots 0,1: they are the replica's GPUs 2,3.
    ({"AIRFLOW_DISTRIBUTED_REPLICA_GPUS": "2,3", "CUDA_VISIBLE_DEVICES": "0,1"}, "2,3"),
    ({"AIRFLOW_DISTRIBUTED_REPLICA_GPUS": "5,7", "CUDA_VISIBLE_DEVICES": "1"}, "7"),
    # A replica that asked for no GPU sees none, whatever slots the launcher numbered.
    ({"AIRFLOW_DISTRIBUTED_REPLICA_GPUS": "", "CUDA_VISIBLE_DEVICES": "0,1"}, ""),
    # torchrun passes the replica's list through: nothing to change.
    ({"AIRFLOW_DISTRIBUTED_REPLICA_GPUS": "2,3", "CUDA_VISIBLE_DEVICES": "2,3"}, None),
    # No word from the backend (a pod numbers its own GPUs from 0), or no list at all.
    ({"CUDA_VISIBLE_DEVICES": "0,1"}, None),
    ({"AIRFLOW_DISTRIBUTED_REPLICA_GPUS": "2,3"}, None),
])
def test_a_launched_process_gets_its_replica_s_gpus_back_from_the_launcher_s_slots(environ, gpus):
    assert replica_gpus(environ) == gpus


def test_the_local_backend_says_each_replica_s_gpus_beside_cuda_visible_devices():
    spec = load_spec("pytorch", {"pytorch": {"n_workers": 1}, "resources": {"gpu": {"limits": 1}}})
    plan = build_plan(spec, "j", LocalAddressing(ports=[1, 2]), LAYOUT, ["python", "t.py"], backend="local",
                      launch=LOCAL_LAUNCH)
    specs = process_specs(plan, interpreter="python", gpus=["4", "6", "9"])
    # The master asked for a GPU (the environment's resources are the master's), the worker for none.
    assert [(s.env["CUDA_VISIBLE_DEVICES"], s.env["AIRFLOW_DISTRIBUTED_REPLICA_GPUS"]) for s in specs] == [
        ("4", "4"), ("", "")]

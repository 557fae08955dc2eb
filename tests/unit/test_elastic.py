"""Elastic PyTorch, pure parts: the resolved policy, the replicas' torchrun command and variables, and what a
backend does with a replica that ended."""

from __future__ import annotations

from dataclasses import dataclass

import pytest

from airflow_distributed.elastic import (
    CONTINUE,
    FAIL,
    RESTART,
    ElasticPlan,
    after_replica_ended,
    agent_restarted,
    elastic_plan,
)
from airflow_distributed.manifests.local import LOCAL_LAUNCH
from airflow_distributed.plan import KubernetesAddressing, Layout, LocalAddressing, build_plan
from airflow_distributed.spec import load_spec

LAYOUT = Layout("/m", "/o", "/f", "/c")


def _plan(elastic: dict | None, addressing=None, command=("python", "train.py")):
    pytorch: dict = {"n_workers": 2}
    if elastic is not None:
        pytorch["elastic"] = elastic
    spec = load_spec("pytorch", {"pytorch": pytorch})
    return build_plan(spec, "job-1", addressing or LocalAddressing(ports=[29500, 29501, 29502]), LAYOUT,
                      list(command), backend="local", launch=LOCAL_LAUNCH)


def test_defaults_are_every_replica_three_restarts():
    assert elastic_plan(load_spec("pytorch", {"pytorch": {"n_workers": 2, "elastic": {}}})) == ElasticPlan(3, 3, 3, 900)
    assert elastic_plan(load_spec("pytorch", {"pytorch": {"n_workers": 3, "elastic": {"min_workers": 2}}})) == \
        ElasticPlan(2, 4, 3, 900)
    assert elastic_plan(load_spec("pytorch", {"pytorch": {"n_workers": 2}})) is None


def test_every_replica_runs_the_command_under_torchrun_with_the_masters_rendezvous():
    plan = _plan({"min_workers": 2, "max_restarts": 1, "rdzv_timeout": 60})
    master, worker = plan.replicas[0], plan.replicas[2]
    head = ("python3", "-m", "torch.distributed.run", "--nnodes", "2:3", "--nproc-per-node", "1",
            "--rdzv-backend", "c10d", "--rdzv-endpoint", "127.0.0.1:29500", "--rdzv-id", "job-1")
    tail = ("--max-restarts", "1", "--no-python", "python", "train.py")
    assert master.command == (*head, "--rdzv-conf", "is_host=true,join_timeout=60", *tail)
    assert worker.command == (*head, "--rdzv-conf", "is_host=false,join_timeout=60", *tail)
    assert {k: worker.env[k] for k in worker.env if k.startswith("PET_")} == {
        "PET_MASTER_ADDR": "127.0.0.1", "PET_MASTER_PORT": "29500", "PET_NNODES": "2:3", "PET_NODE_RANK": "2",
        "PET_NPROC_PER_NODE": "1", "PET_RDZV_BACKEND": "c10d", "PET_RDZV_ENDPOINT": "127.0.0.1:29500",
        "PET_RDZV_ID": "job-1", "PET_MAX_RESTARTS": "1",
    }
    assert worker.env["TORCH_DISABLE_SHARE_RDZV_TCP_STORE"] == "1" and worker.env["LOGLEVEL"] == "INFO"
    assert plan.elastic == ElasticPlan(2, 3, 1, 60)


def test_on_kubernetes_the_rendezvous_is_the_masters_stable_name():
    plan = _plan({}, KubernetesAddressing("ml"))
    endpoint = "job-1-master-0.job-1.ml.svc:23456"
    assert plan.replicas[1].command[plan.replicas[1].command.index("--rdzv-endpoint") + 1] == endpoint
    assert plan.replicas[1].env["PET_RDZV_ENDPOINT"] == endpoint


def test_a_command_that_starts_torchrun_itself_is_not_wrapped_again():
    plan = _plan({}, command=("torchrun", "train.py"))
    assert plan.replicas[1].command == ("torchrun", "train.py")
    assert plan.replicas[1].env["PET_RDZV_BACKEND"] == "c10d"


def test_a_fixed_job_keeps_the_plain_command_and_variables():
    plan = _plan(None)
    assert plan.replicas[1].command == ("python", "train.py") and plan.elastic is None
    assert "PET_RDZV_BACKEND" not in plan.replicas[1].env and plan.replicas[1].env["PET_NNODES"] == "3"


def test_the_agents_restart_line_is_counted_and_membership_changes_are_not():
    assert agent_restarted("I1123 api.py:942] [default] Worker group FAILED. 1/3 attempts left; "
                           "will restart worker group")
    assert not agent_restarted("I1123 api.py:962] [default] Detected 1 new nodes from group_rank=0; "
                               "will restart worker group")


@dataclass(frozen=True)
class EndCase:
    name: str
    exit_code: int | None
    restarts: int
    left: int
    is_master: bool
    action: str
    message: str


POLICY = ElasticPlan(min_replicas=2, max_replicas=3, max_restarts=2, rdzv_timeout=60)
END_CASES = [
    EndCase("killed with restarts left", -9, 0, 2, False, RESTART,
            "replica w was killed by signal 9: restarting it (1 of max_restarts=2)"),
    EndCase("pod killed", 137, 1, 2, False, RESTART, "replica w was killed (exit code 137): restarting it (2 of"),
    EndCase("pod gone", None, 0, 2, False, RESTART, "replica w was lost (its pod failed or was deleted)"),
    EndCase("killed without restarts left, enough left", -9, 2, 2, False, CONTINUE,
            "replica w was killed by signal 9 after 2 restarts of max_restarts=2; carrying on with 2 replicas "
            "(min_workers=2)"),
    EndCase("agent gave up, too few left", 1, 0, 1, False, FAIL,
            "replica w failed with exit code 1 after 0 restarts of max_restarts=2: 1 replica left, below "
            "min_workers=2"),
    EndCase("the master", -9, 0, 2, True, FAIL,
            "replica w (the master, which hosts the rendezvous) was killed by signal 9 after 0 restarts"),
]


@pytest.mark.parametrize("case", END_CASES, ids=[c.name for c in END_CASES])
def test_what_a_backend_does_with_a_replica_that_ended(case: EndCase):
    decision = after_replica_ended(POLICY, name="w", is_master=case.is_master, exit_code=case.exit_code,
                                   restarts=case.restarts, left=case.left)
    assert decision.action == case.action
    assert decision.message.startswith(case.message), decision.message


def test_an_elastic_jobs_state_comes_back_whole_from_a_deferrals_json():
    # What the task knew before deferring (budget, replicas dropped, runs of replaced pods) rides in the trigger's
    # event as JSON; the resumed task must count the same restarts and usage, and show the same final table.
    import json

    from airflow_distributed.backends.kubernetes_elastic import ElasticRestarts
    from airflow_distributed.elastic import ElasticPlan
    from airflow_distributed.jobstate.usage import ReplicaRun, Requests
    from airflow_distributed.status import ReplicaStatus

    state = ElasticRestarts(
        ElasticPlan(2, 3, 1, 900),
        {"j-worker-1": ReplicaStatus("j-worker-1", "worker", 1, "failed", exit_code=1, restarts=1, reason="Error")},
        [ReplicaRun("j-worker-1", Requests(2.0, 4.0, 1.0), 10.0, 70.0),
         ReplicaRun("j-worker-0", Requests(), None, None)],
    )
    assert ElasticRestarts.of_state(json.loads(json.dumps(state.state()))) == state
    assert ElasticRestarts.of_state(json.loads(json.dumps(ElasticRestarts().state()))) == ElasticRestarts()

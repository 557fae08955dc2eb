"""Processes and GPUs of each replica (``environment.pytorch.n_proc_per_node``, its GPU request) in the replica
table, the rows read from pods, the job record and the job view; pure."""

from __future__ import annotations

import json

from airflow_distributed.jobstate.kubeflow_pods import replica_statuses_of_pods
from airflow_distributed.jobstate.pod_state import pod_essentials, replica_status
from airflow_distributed.jobstate.verdicts import ReplicaSlot
from airflow_distributed.outputs import job_result
from airflow_distributed.plugins.page import job_page
from airflow_distributed.status import ReplicaState, ReplicaStatus, render_table
from airflow_distributed.task_instance import TaskInstanceRef

REF = TaskInstanceRef(dag_id="d", run_id="r", task_id="t")


def _rows(processes: int | None, gpus: int | None) -> list[ReplicaStatus]:
    return [ReplicaStatus(f"j-{role}-0", role, 0, ReplicaState.RUNNING, where="pid 7", processes=processes, gpus=gpus)
            for role in ("master", "worker")]


def test_the_table_counts_processes_and_gpus_only_where_a_replica_has_them():
    assert render_table(_rows(None, None)).splitlines()[0].split() == [
        "REPLICA", "ROLE", "INDEX", "STATE", "WHERE", "RESTARTS", "EXIT"]
    # one process per replica (said or not) and no GPU: the narrow table of most jobs
    assert render_table(_rows(1, 0)) == render_table(_rows(None, None))
    table = render_table(_rows(3, None)).splitlines()
    assert table[0].split() == ["REPLICA", "ROLE", "INDEX", "STATE", "WHERE", "PROCESSES", "RESTARTS", "EXIT"]
    assert table[1].split() == ["j-master-0", "master", "0", "running", "pid", "7", "3", "0", "-"]
    table = render_table(_rows(None, 2)).splitlines()
    assert table[0].split() == ["REPLICA", "ROLE", "INDEX", "STATE", "WHERE", "GPUS", "RESTARTS", "EXIT"]
    table = render_table([*_rows(8, 8), ReplicaStatus("j-ps-0", "ps", 0, "pending")]).splitlines()
    assert table[0].split()[5:7] == ["PROCESSES", "GPUS"]
    assert table[3].split()[4:7] == ["-", "1", "0"]


def _pod(container: str, env: list[dict], gpus: str | None) -> dict:
    resources = {"requests": {"cpu": "1", **({"nvidia.com/gpu": gpus} if gpus else {})},
                 "limits": {"nvidia.com/gpu": gpus} if gpus else {}}
    return {"metadata": {"name": "j-worker-0", "labels": {"training.kubeflow.org/replica-type": "worker",
                                                          "training.kubeflow.org/replica-index": "0"}},
            "spec": {"nodeName": "n1", "containers": [
                {"name": container, "image": "i", "env": [{"name": "MASTER_ADDR", "value": "j-master-0"}, *env],
                 "resources": resources},
                {"name": "xcom-sidecar", "image": "s"}]},
            "status": {"phase": "Running", "containerStatuses": [
                {"name": container, "restartCount": 0, "state": {"running": {"startedAt": "2026-01-01T00:00:00Z"}}}]}}


def test_a_pods_row_counts_the_processes_and_gpus_it_says_as_a_waiter_keeps_it():
    slot = ReplicaSlot("j-worker-0", "worker", 0)
    pod = _pod("base", [{"name": "PET_NPROC_PER_NODE", "value": "4"}], "4")
    for seen in (pod, pod_essentials(pod)):
        row = replica_status(slot, seen)
        assert (row.state, row.processes, row.gpus) == (ReplicaState.RUNNING, 4, 4)
    # a framework of one process per replica sets no PET_NPROC_PER_NODE; one set to 1 says nothing either
    for env in ([], [{"name": "PET_NPROC_PER_NODE", "value": "1"}]):
        row = replica_status(slot, _pod("base", env, None))
        assert (row.processes, row.gpus) == (None, None)
        assert "processes" not in row.as_dict() and "gpus" not in row.as_dict()
    # a training operator's pod (the variable set from nprocPerNode), its container named by the kind
    (row,) = replica_statuses_of_pods([_pod("pytorch", [{"name": "PET_NPROC_PER_NODE", "value": "2"}], "2")],
                                      "pytorch")
    assert (row.role, row.processes, row.gpus) == ("worker", 2, 2)


def _record(rows: list[ReplicaStatus]) -> dict:
    result = job_result(job_name="j", framework="pytorch", backend="kubernetes", state="running",
                        document={"metrics": {}, "model_path": None}, replicas=rows)
    return json.loads(json.dumps(result))  # as the XCom keeps it


def test_the_record_and_the_job_view_say_the_world_size_and_each_replicas_processes():
    record = _record(_rows(3, 1))
    assert [(r["processes"], r["gpus"]) for r in record["replicas"]] == [(3, 1), (3, 1)]
    page = job_page(record, REF, source="live", show_logs=False, json_href="/x")
    assert "world size 6: 2 replicas \u00d7 3 processes" in page
    assert "<th>Processes</th>" in page and "<th>GPUs</th>" in page
    assert page.count('<td class="num processes">3</td>') == 2 and page.count('<td class="num gpus">1</td>') == 2
    # one process per replica: the record's rows and the view are as they were
    record = _record(_rows(None, None))
    assert set(record["replicas"][0]) == {"name", "role", "index", "state", "exit_code", "restarts"}
    page = job_page(record, REF, source="live", show_logs=False, json_href="/x")
    assert "world size" not in page and "<th>Processes</th>" not in page and "<th>GPUs</th>" not in page

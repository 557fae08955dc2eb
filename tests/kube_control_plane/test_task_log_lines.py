"""A Kubernetes job's replica lines after it ended, on the real control plane: in no XCom, in the task log's closing
block, and in the job view only for a viewer who may read task logs, read back from the task log file with
Airflow's log reader.

Real DAG runs, sync and deferred, the task run under Airflow's supervisor (``tests.supervised_runs``: its log file is
the one a worker writes, a deferred task's trigger run in line), talking as the task's service account bound to the
backend's Role, none of whose requests is refused. The view is Airflow's own API server app; ``alice`` may read the
DAG's XComs and task logs, ``reader`` its XComs only (``tests.auth_manager``).
"""

from __future__ import annotations

import json

import pytest

from tests.api_server import as_user, task_reads
from tests.helpers import run_dag_at, wait_until, xcom
from tests.kube_control_plane.control_plane import ControlPlane
from tests.kube_control_plane.kubelet import KubeletNode
from tests.kubernetes_helpers import Kubelet, train_and_succeed
from tests.live_view import view_client
from tests.supervised_runs import supervised_tasks

pytestmark = [pytest.mark.usefixtures("airflow_db")]

MASTER_LINES = ["step 1 loss 0.500", "step 2 loss 0.250", "step 3 loss 0.125"]


@pytest.mark.parametrize("dag_namespace", ["k8s_success", "k8s_deferrable"], indirect=True)
def test_a_kubernetes_jobs_last_lines_are_the_task_logs_and_shown_only_to_who_may_read_it(
        control_plane: ControlPlane, node: KubeletNode, dag_namespace: tuple[str, str], tmp_path):
    namespace, user = dag_namespace
    dag_id = namespace.replace("-", "_")

    def script(kubelet: Kubelet) -> None:
        wait_until(lambda: any(e["verb"] == "watch" for e in control_plane.audit_events(user)), timeout=60)
        train_and_succeed(kubelet)

    kubelet = Kubelet(node, namespace).play(script)
    with supervised_tasks():
        run, states = run_dag_at(dag_id)
    kubelet.check()

    assert set(states.values()) == {"success"}
    job = xcom(run, "train", "job_name")
    with view_client(tmp_path) as client:
        allowed = task_reads(client, dag_id, run.run_id, "train", as_user(client, "alice"))
        refused = task_reads(client, dag_id, run.run_id, "train", as_user(client, "reader"))
    for texts in (allowed, refused):
        assert [where for where, text in texts.items()
                if not where.startswith("view") and any(line in text for line in MASTER_LINES)] == []
    record = json.loads(allowed["view json"])
    assert record["source"] == "recorded" and record["logs"][f"{job}-master-0"] == MASTER_LINES
    assert all(line in allowed["view html"] for line in MASTER_LINES)
    assert json.loads(refused["view json"])["logs"] is None
    assert "No permission to read logs" in refused["view html"]
    assert not any(line in refused["view html"] for line in MASTER_LINES)
    control_plane.assert_clean(namespace, user)

"""A job of two replicas of two processes on two GPUs each (``n_proc_per_node="auto"``) on the real control plane,
sync and deferrable: the pods the API server returns say their processes (``PET_NPROC_PER_NODE``) and GPUs, and the
task log's table, the job record, its usage and the job view count every one of them."""

from __future__ import annotations

import re

import pytest

from airflow_distributed.plugins.job_state import TaskInstanceRef
from airflow_distributed.plugins.page import job_page
from tests.helpers import run_dag_at, xcom
from tests.kube_control_plane.control_plane import ControlPlane
from tests.kube_control_plane.kubelet import KubeletNode
from tests.kubernetes_helpers import Kubelet, train_and_succeed

pytestmark = [pytest.mark.usefixtures("airflow_db")]


@pytest.mark.parametrize("dag_namespace", ["k8s_nproc", "k8s_nproc_deferrable"], indirect=True)
def test_the_table_the_record_and_usage_count_each_replicas_processes_and_gpus(
        control_plane: ControlPlane, node: KubeletNode, dag_namespace: tuple[str, str], capfd):
    namespace, user = dag_namespace
    kubelet = Kubelet(node, namespace, pods=2).play(train_and_succeed)
    run, states = run_dag_at(namespace.replace("-", "_"))
    kubelet.check()

    out = capfd.readouterr().out
    assert states == {"train": "success"}, out[-6000:]
    job = xcom(run, "train")["job_name"]
    assert re.search(r"REPLICA +ROLE +INDEX +STATE +WHERE +PROCESSES +GPUS +RESTARTS +EXIT\n", out), out[-6000:]
    for replica in (f"{job}-master-0", f"{job}-worker-0"):
        assert re.search(rf"{replica} +\w+ +0 +\w+ +\S+ +2 +2 +0 ", out), out[-6000:]
    record = xcom(run, "train", "job")
    assert [(r["processes"], r["gpus"]) for r in record["replicas"]] == [(2, 2), (2, 2)]
    usage = record["usage"]
    assert [(row["processes"], row["gpu"]) for row in usage["replicas"].values()] == [(2, 2.0), (2, 2.0)]
    assert usage["running_seconds"] > 0
    assert usage["process_seconds"] == pytest.approx(2 * usage["running_seconds"], abs=0.01)
    assert usage["gpu_seconds"] == pytest.approx(2 * usage["running_seconds"], abs=0.01)
    page = job_page(record, TaskInstanceRef(dag_id=run.dag_id, run_id=run.run_id, task_id="train"),
                    source="recorded", show_logs=False, json_href="/x")
    assert "world size 4: 2 replicas \u00d7 2 processes" in page
    control_plane.assert_clean(namespace, user)

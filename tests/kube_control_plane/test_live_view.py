"""The job view of a running cluster job on the real control plane: each progress the master reports (10, 50 and
90 %, from a real ``tracking`` process) shows in the view's JSON within 30 s while the task waits, and the task log
has the master's lines once each.

Real DAG runs, sync and deferred: a Kubernetes job, a PyTorchJob (the stand-in Training Operator) and a TrainJob (the
stand-in Trainer controller). In a synchronous wait the task follows the master's lines into its log (a Kubeflow
job's master pod, a TrainJob's node 0); deferred, its trigger relays them. The view is asked over HTTP through
Airflow's own API server app, as a viewer of the team that owns the DAG, and reads the cluster through the DAG's
connection: the task's service account, bound to exactly its backend's Roles of docs/rbac.yaml, none of whose
requests (the task's, its trigger's, the view's) is refused. The scripts and checks are the emulator's
(``tests/live_view.py``)."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from functools import partial
from pathlib import Path
from typing import Any

import pytest

from airflow_distributed.plugins.live_kubernetes import RECORD_TAIL_LINES
from tests.helpers import run_dag_at
from tests.kube_control_plane.control_plane import NOTHING, ControlPlane
from tests.kube_control_plane.custom_jobs import RealKubeflowController, RealTrainerController
from tests.kube_control_plane.kubelet import KubeletNode
from tests.kubernetes_helpers import Kubelet, comes_to
from tests.live_view import (
    Seen,
    assert_master_lines_once,
    assert_no_line_without_log_permission,
    assert_reports_shown,
    assert_trainjob_shown,
    kubernetes_reports,
    pytorchjob_reports,
    trainjob_reports,
    view_client,
)

pytestmark = [pytest.mark.usefixtures("airflow_db")]


@pytest.fixture
def client(tmp_path) -> Iterator[Any]:
    with view_client(tmp_path) as test_client:
        yield test_client


def run_reported(namespace: str, player: Any, reports: Callable[..., Callable], client: Any, tmp_path: Path
                 ) -> tuple[dict[str, str], Seen, str]:
    """The DAG of ``namespace`` run while ``player`` (kubelet or controller) plays its ``reports`` script:
    ``(task states, what the view showed, the task's state while it waited)``."""
    dag_id = namespace.replace("-", "_")
    seen: Seen = {}
    player.play(reports(client, dag_id, str(tmp_path / "output.json"), seen))
    run, states = run_dag_at(dag_id)
    player.check()
    # After the job as while it ran (``shown_at``): none of the master's lines for a viewer who may not read logs.
    assert_no_line_without_log_permission(client, dag_id, run.run_id, [f"step {p} done" for p in (10, 50, 90)])
    return states, seen, "queued" if dag_id.endswith("deferrable") else "running"


def assert_all_read_as_the_task(control_plane: ControlPlane, user: str) -> None:
    """The view read the master's log as the task's service account (its read of the last ``RECORD_TAIL_LINES``,
    in the audit log), and none of that account's requests was refused."""
    assert any((e.get("objectRef") or {}).get("subresource") == "log"
               and f"tailLines={RECORD_TAIL_LINES}" in e.get("requestURI", "")
               for e in control_plane.audit_events(user))
    assert control_plane.refused(user) == []


@pytest.mark.parametrize("dag_namespace", ["k8s_live", "k8s_live_deferrable"], indirect=True)
def test_a_kubernetes_jobs_reports_show_in_the_view_while_the_task_waits(
        control_plane: ControlPlane, node: KubeletNode, dag_namespace: tuple[str, str], client, tmp_path, capfd):
    namespace, user = dag_namespace
    reports = partial(kubernetes_reports, watched=lambda: any(e["verb"] == "watch"
                                                              for e in control_plane.audit_events(user)))
    states, seen, waiting = run_reported(namespace, Kubelet(node, namespace, pods=2), reports, client, tmp_path)

    assert states == {"train": "success"}
    assert_reports_shown(seen, "kubernetes", waiting)
    # followed into the task log by the task (sync) or relayed by its trigger (deferred)
    assert_master_lines_once(capfd.readouterr().out)
    comes_to(lambda: control_plane.left(namespace), NOTHING, timeout=60)
    assert_all_read_as_the_task(control_plane, user)


@pytest.mark.parametrize("dag_namespace", ["kubeflow_success", "kubeflow_deferrable"], indirect=True)
def test_a_pytorchjobs_reports_show_in_the_view_while_the_task_waits(
        control_plane: ControlPlane, node: KubeletNode, dag_namespace: tuple[str, str], client, tmp_path, capfd):
    namespace, user = dag_namespace
    controller = RealKubeflowController(control_plane, node, namespace, "pytorchjobs")
    states, seen, waiting = run_reported(namespace, controller, pytorchjob_reports, client, tmp_path)

    assert states["train"] == "success"
    assert_reports_shown(seen, "kubeflow", waiting)
    assert [r["role"] for r in seen[90][0]["replicas"]] == ["master", "worker", "worker"]
    # followed into the task log by the task (sync) or relayed by its trigger (deferred)
    assert_master_lines_once(capfd.readouterr().out)
    comes_to(lambda: (controller.jobs(), control_plane.left(namespace)), ([], NOTHING), timeout=60)
    assert_all_read_as_the_task(control_plane, user)


@pytest.mark.parametrize("dag_namespace", ["trainjob_success", "trainjob_deferrable"], indirect=True)
def test_a_trainjobs_trainer_status_then_its_masters_reports_show_in_the_view_while_the_task_waits(
        control_plane: ControlPlane, node: KubeletNode, dag_namespace: tuple[str, str], client, tmp_path, capfd):
    namespace, user = dag_namespace
    controller = RealTrainerController(control_plane, node, namespace)
    states, seen, waiting = run_reported(namespace, controller, trainjob_reports, client, tmp_path)

    assert states["train"] == "success"
    assert_trainjob_shown(seen, waiting)
    out = capfd.readouterr().out
    assert_master_lines_once(out)  # node 0's: followed by the task (sync) or relayed by its trigger (deferred)
    if waiting == "running":  # a synchronous wait logs status.trainerStatus as it changes too
        assert "45% done, about 1m00s left; loss=0.25" in out
    comes_to(lambda: (controller.jobs(), control_plane.left(namespace)), ([], NOTHING), timeout=60)
    assert_all_read_as_the_task(control_plane, user)

"""The job view of a running Kubeflow job and TrainJob, live: the master's ``tracking`` reports in the view's JSON
while the task waits (deferred for the PyTorchJob, here for the TrainJob), and a TrainJob's ``trainerStatus``
shown until the master's first record.

Real DAG runs against the API emulator with the CRDs; the test plays the controllers, and the master's log lines are
what a real ``tracking`` process prints. The view is asked through Airflow's API server app.
"""

from __future__ import annotations

import pytest

from tests.dags.kubeflow_dags import namespace_of as kubeflow_namespace
from tests.dags.trainjob_dags import namespace_of as trainjob_namespace
from tests.helpers import run_dag_at
from tests.integration.kubeflow_controller import KubeflowController, register_kubeflow_crds
from tests.integration.trainjob_controller import TrainerController, register_trainjob_crd
from tests.kubernetes_helpers import crd_emulator
from tests.live_view import (
    Seen,
    assert_master_lines_once,
    assert_reports_shown,
    assert_trainjob_shown,
    pytorchjob_reports,
    trainjob_reports,
    view_client,
)

emulator = crd_emulator(lambda emu: (register_kubeflow_crds(emu), register_trainjob_crd(emu)))

pytestmark = [pytest.mark.usefixtures("airflow_db", "kubernetes_connection")]


@pytest.fixture
def client(emulator, kubeconfig, tmp_path):
    from kubernetes.config import kube_config

    with pytest.MonkeyPatch.context() as env, view_client(tmp_path) as test_client:
        env.setattr(kube_config, "KUBE_CONFIG_DEFAULT_LOCATION", kubeconfig)
        yield test_client


def test_a_deferred_pytorchjob_shows_each_progress_its_master_reports(emulator, client, tmp_path, capfd):
    dag_id = "kubeflow_deferrable"
    emulator.create_namespace(kubeflow_namespace(dag_id))
    seen: Seen = {}
    controller = KubeflowController(emulator, kubeflow_namespace(dag_id), "pytorchjobs").play(
        pytorchjob_reports(client, dag_id, str(tmp_path / "output.json"), seen))
    run, states = run_dag_at(dag_id)
    controller.check()

    assert set(states.values()) == {"success"}
    assert_reports_shown(seen, "kubeflow", "queued")
    assert [r["role"] for r in seen[90][0]["replicas"]] == ["master", "worker", "worker"]
    assert_master_lines_once(capfd.readouterr().out)  # relayed by the trigger


def test_a_trainjob_shows_its_trainer_status_then_what_its_master_reports(emulator, client, tmp_path):
    dag_id = "trainjob_success"
    emulator.create_namespace(trainjob_namespace(dag_id))
    seen: Seen = {}
    controller = TrainerController(emulator, trainjob_namespace(dag_id)).play(
        trainjob_reports(client, dag_id, str(tmp_path / "output.json"), seen))
    run, states = run_dag_at(dag_id)
    controller.check()

    assert states["train"] == "success"
    assert_trainjob_shown(seen, "running")

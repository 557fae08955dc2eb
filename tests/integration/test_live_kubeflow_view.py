"""The job view of a running Kubeflow job and TrainJob, live: the master's ``tracking`` reports in the view's JSON
while the task waits (deferred for the PyTorchJob, here for the TrainJob), and a TrainJob's ``trainerStatus``
shown until the master's first record.

Real DAG runs against the API emulator with the CRDs; the test plays the controllers, and the master's log lines are
what a real ``tracking`` process prints. The view is asked through Airflow's API server app.
"""

from __future__ import annotations

from urllib.parse import quote

import pytest

from tests.api_server import api_client, as_user
from tests.dags.kubeflow_dags import namespace_of as kubeflow_namespace
from tests.dags.trainjob_dags import namespace_of as trainjob_namespace
from tests.helpers import run_dag_at, wait_until
from tests.integration.kubeflow_controller import KubeflowController, register_kubeflow_crds
from tests.integration.test_live_cluster_view import Master, dags_folder_bundle, latest_run_id
from tests.integration.trainjob_controller import TrainerController, register_trainjob_crd
from tests.kubernetes_helpers import DOCUMENT, crd_emulator

emulator = crd_emulator(lambda emu: (register_kubeflow_crds(emu), register_trainjob_crd(emu)))

pytestmark = [pytest.mark.usefixtures("airflow_db", "kubernetes_connection")]


def shown_at(client, dag_id: str, percent: float) -> dict:
    """The view's JSON once it shows ``percent``; fails after 30 s."""
    run_id = wait_until(lambda: latest_run_id(dag_id))
    api = f"/distributed/api/jobs/{dag_id}/{quote(run_id, safe='')}/train"
    headers = as_user(client, "alice")

    last: list[dict] = []

    def shown() -> dict | None:
        record = client.get(api, headers=headers).json()
        last[:] = [record]
        return record if (record.get("progress") or {}).get("percent") == percent else None

    try:
        return wait_until(shown, timeout=30, interval=0.5)
    except AssertionError:
        raise AssertionError(f"the view did not show {percent}% within 30 s: {last}") from None


@pytest.fixture
def client(emulator, kubeconfig, tmp_path):
    from kubernetes.config import kube_config

    dags_folder_bundle()
    with (pytest.MonkeyPatch.context() as env,
          api_client({"alice": "viewer:ml"}, "ml", ("ml",), tmp_path) as test_client):
        env.setattr(kube_config, "KUBE_CONFIG_DEFAULT_LOCATION", kubeconfig)
        yield test_client


def test_a_deferred_pytorchjob_shows_each_progress_its_master_reports(emulator, client, tmp_path):
    dag_id = "kubeflow_deferrable"
    namespace = kubeflow_namespace(dag_id)
    emulator.create_namespace(namespace)
    seen: dict[int, dict] = {}

    def script(controller: KubeflowController) -> None:
        controller.wait_for_job()
        kind = controller.kind
        container = controller.job["spec"][controller.specs_key]["Master"]["template"]["spec"]["containers"][0]["name"]
        controller.create_pods()
        controller.run_all()
        controller.conditions(("Created", f"{kind}Created", ""), ("Running", f"{kind}Running", ""))
        wait_until(controller.watched, timeout=60, interval=0.02)
        master = Master(lambda line: controller.log("master-0", line, container=container),
                        str(tmp_path / "output.json"))
        try:
            for percent in (10, 50, 90):
                master.report(percent)
                seen[percent] = shown_at(client, dag_id, percent)
        finally:
            master.end()
            for key in ("master-0", "worker-0", "worker-1"):
                controller.succeed(key, DOCUMENT if key == "master-0" else None)
            controller.conditions(("Created", f"{kind}Created", ""), ("Running", f"{kind}Running", ""),
                                  ("Succeeded", f"{kind}Succeeded", f"{kind} {controller.name} succeeded."))

    controller = KubeflowController(emulator, namespace, "pytorchjobs").play(script)
    run, states = run_dag_at(dag_id)
    controller.check()

    assert set(states.values()) == {"success"}
    assert sorted(seen) == [10, 50, 90]
    for percent, record in seen.items():
        assert (record["source"], record["backend"], record["state"]) == ("live", "kubeflow", "running")
        assert record["metrics"] == {"loss": 1 - percent / 100} and record["progress"]["step"] == percent
        assert [r["role"] for r in record["replicas"]] == ["master", "worker", "worker"]
        # The try's usage so far, from the pods as the view read them: three replicas, every figure a number.
        assert sorted(record["usage"]["replicas"]) == sorted(r["name"] for r in record["replicas"])
        assert record["usage"]["wall_seconds"] >= 0 and record["usage"]["tries"] == 1
        (lines,) = record["logs"].values()
        assert lines[-1] == f"step {percent} done"


def test_a_trainjob_shows_its_trainer_status_then_what_its_master_reports(emulator, client, tmp_path):
    dag_id = "trainjob_success"
    namespace = trainjob_namespace(dag_id)
    emulator.create_namespace(namespace)
    seen: dict[float, dict] = {}

    def script(controller: TrainerController) -> None:
        controller.start()
        try:
            # Before the master's first record: the controller's status.trainerStatus (TrainJobStatus gate).
            controller.write_status(active=1, progress={"progressPercentage": 45, "estimatedRemainingSeconds": 60,
                                                        "metrics": [{"name": "loss", "value": "0.25"}]})
            seen[45] = shown_at(client, dag_id, 45)
            master = Master(lambda line: controller.log(0, line), str(tmp_path / "output.json"))
            try:
                for percent in (10, 50, 90):
                    master.report(percent)
                    seen[percent] = shown_at(client, dag_id, percent)
            finally:
                master.end()
        finally:
            controller.succeed(0, DOCUMENT)
            controller.succeed(1)
            controller.succeed(2)
            controller.condition("Complete", "True", "AllJobsCompleted", "jobset completed successfully")

    controller = TrainerController(emulator, namespace).play(script)
    run, states = run_dag_at(dag_id)
    controller.check()

    assert states["train"] == "success"
    assert seen[45]["source"] == "live" and seen[45]["metrics"] == {"loss": "0.25"}
    assert seen[45]["progress"] == {"percent": 45, "eta_seconds": 60}
    for percent in (10, 50, 90):
        record = seen[percent]
        assert (record["backend"], record["state"]) == ("trainjob", "running")
        assert record["metrics"] == {"loss": 1 - percent / 100} and record["progress"]["step"] == percent
        assert record["trainer_status"]["progress_percentage"] == 45  # shown beside the master's own report
        assert len(record["replicas"]) == 3

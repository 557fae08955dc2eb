"""The sensors' modes against the real control plane, the task talking as the service account bound to exactly the
Roles of docs/rbac.yaml: reschedule (the worker freed between pokes), deferrable (the trigger's watch of the
namespace's provider pods, the pods appearing only once it waits), a failed replica failing the sensor at once,
and a Kubeflow job's sensor in the triggerer and while the job is suspended. The same DAGs as the emulator's tests
(``tests/integration/test_sensors.py``); the jobs are started outside Airflow (pods with the project's labels, or a
PyTorchJob and the stand-in controller), so a sensor owns nothing and deletes nothing."""

from __future__ import annotations

import json
from urllib.parse import parse_qs, urlsplit

import pytest

from tests.dags.sensor_dags import JOB
from tests.helpers import run_dag_at, wait_until, xcom
from tests.kube_control_plane.control_plane import ControlPlane
from tests.kube_control_plane.custom_jobs import RealKubeflowController
from tests.kube_control_plane.kubelet import KubeletNode
from tests.kubernetes_helpers import DOCUMENT, Player

pytestmark = [pytest.mark.usefixtures("airflow_db")]


def labelled_pods(node: KubeletNode, namespace: str) -> dict[str, str]:
    """A job started outside Airflow with the project's labels: a master and two workers, running on the node."""
    names = {}
    for role_name, index, master in (("master", 0, True), ("worker", 0, False), ("worker", 1, False)):
        name = f"{JOB}-{role_name}-{index}"
        node.create("pods", namespace, {"metadata": {"name": name, "labels": {
            "airflow-distributed/job": JOB, "airflow-distributed/role": role_name,
            "airflow-distributed/index": str(index), "airflow-distributed/master": str(master).lower()}},
            "spec": {"restartPolicy": "Never", "containers": [{
                "name": "base", "image": "registry.example.com/trainer:1.0",
                "env": [{"name": "AIRFLOW_DISTRIBUTED_FRAMEWORK", "value": "pytorch"}]}]}})
        node.run_pod(namespace, name)
        names[f"{role_name}-{index}"] = name
    return names


def requests_of(plane: ControlPlane, user: str, verb: str, resource: str) -> list[dict]:
    """The requests (one event each, however many stages the audit log has of it) of ``user``."""
    seen: dict[str, dict] = {}
    for event in plane.audit_events(user):
        ref = event.get("objectRef") or {}
        if event["verb"] == verb and ref.get("resource") == resource:
            seen.setdefault(event["auditID"], event)
    return list(seen.values())


def succeed(c: RealKubeflowController) -> None:
    """The PyTorchJob's master and worker end well, and the controller says so."""
    c.succeed("master-0", DOCUMENT)
    c.succeed("worker-0")
    c.conditions(("Created", "PyTorchJobCreated", ""), ("Running", "PyTorchJobRunning", ""),
                 ("Succeeded", "PyTorchJobSucceeded", ""))


def query_of(event: dict) -> dict[str, list[str]]:
    return parse_qs(urlsplit(event["requestURI"]).query)


def ti_of(run, task_id: str = "wait"):
    return next(ti for ti in run.get_task_instances() if ti.task_id == task_id)


@pytest.mark.parametrize("dag_namespace", ["sensor_reschedule"], indirect=True)
def test_reschedule_mode_frees_the_worker_between_pokes_until_the_job_succeeds(
        control_plane: ControlPlane, node: KubeletNode, dag_namespace: tuple[str, str]):
    from airflow.models.taskreschedule import TaskReschedule
    from airflow.utils.session import create_session
    from sqlalchemy import func, select

    namespace, user = dag_namespace
    pods = labelled_pods(node, namespace)

    def script(_) -> None:
        wait_until(lambda: len(requests_of(control_plane, user, "list", "pods")) >= 2, timeout=60, interval=0.05)
        node.succeed_pod(namespace, pods["master-0"], message=json.dumps(DOCUMENT))

    player = Player().play(script)
    run, states = run_dag_at("sensor_reschedule")
    player.check()

    assert states == {"wait": "success"}
    assert xcom(run, "wait", "metrics") == DOCUMENT["metrics"]
    with create_session() as session:
        reschedules = session.scalar(select(func.count()).select_from(TaskReschedule).where(
            TaskReschedule.ti_id == ti_of(run).id))
    assert reschedules >= 1
    # A sensor deletes nothing: the three pods are still there.
    assert len(control_plane.request("GET", f"/api/v1/namespaces/{namespace}/pods")["items"]) == 3
    assert control_plane.refused(user) == []


@pytest.mark.parametrize("dag_namespace", ["sensor_deferrable"], indirect=True)
def test_a_deferred_sensor_watches_the_pods_in_the_triggerer_until_the_master_succeeds(
        control_plane: ControlPlane, node: KubeletNode, dag_namespace: tuple[str, str], capfd):
    namespace, user = dag_namespace

    def script(_) -> None:
        # No pods at first: the sensor comes back after poke_interval, then watches the pods the job gets.
        wait_until(lambda: requests_of(control_plane, user, "list", "pods"), timeout=60, interval=0.05)
        pods = labelled_pods(node, namespace)
        wait_until(lambda: requests_of(control_plane, user, "watch", "pods"), timeout=60, interval=0.05)
        node.succeed_pod(namespace, pods["master-0"], message=json.dumps(DOCUMENT))

    player = Player().play(script)
    run, states = run_dag_at("sensor_deferrable")
    player.check()

    assert states == {"wait": "success"}
    assert xcom(run, "wait", "metrics") == DOCUMENT["metrics"]
    assert "waiting in the triggerer" in capfd.readouterr().out
    # The watch of the namespace's provider pods that the triggerer's jobs there share (shared_watch).
    watches = requests_of(control_plane, user, "watch", "pods")
    assert watches and all(query_of(e)["labelSelector"] == ["airflow-distributed/job"] for e in watches)
    assert len(control_plane.request("GET", f"/api/v1/namespaces/{namespace}/pods")["items"]) == 3
    assert control_plane.refused(user) == []


PULL_ERROR = 'failed to pull image "registry.example.com/trainer:1.0": unauthorized'


@pytest.mark.parametrize(("dag_namespace", "state"), [
    ("sensor_failure", "failed"), ("sensor_soft_fail", "skipped"),
    ("sensor_image_pull", "failed"), ("sensor_image_pull_deferrable", "failed")], indirect=["dag_namespace"])
def test_a_failed_replica_fails_the_sensor_at_once_naming_it_without_retry(
        control_plane: ControlPlane, node: KubeletNode, dag_namespace: tuple[str, str], state: str, capfd):
    namespace, user = dag_namespace
    pods = labelled_pods(node, namespace)
    if "image-pull" in namespace:
        node.pending_pod(namespace, pods["worker-1"], reason="ImagePullBackOff", message=PULL_ERROR)
        expected = (f'replica {pods["worker-1"]}: image "registry.example.com/trainer:1.0" could not be pulled '
                    f"(ImagePullBackOff: {PULL_ERROR})")
    else:
        node.fail_pod(namespace, pods["worker-1"], exit_code=137, reason="OOMKilled")
        expected = f"job {namespace}/{JOB} failed: replica {pods['worker-1']} exited with code 137 (OOMKilled)"

    run, states = run_dag_at(namespace.replace("-", "_"))

    assert states == {"wait": state}
    if state == "failed":
        assert expected in capfd.readouterr().out
    assert ti_of(run).try_number == 1  # sensor_failure has retries=2: a job that failed stays failed
    assert xcom(run, "wait", "metrics") is None
    assert len(control_plane.request("GET", f"/api/v1/namespaces/{namespace}/pods")["items"]) == 3
    assert control_plane.refused(user) == []


@pytest.mark.parametrize("dag_namespace", ["sensor_pytorchjob_deferrable"], indirect=True)
def test_a_deferred_pytorchjob_sensor_watches_the_object_in_the_triggerer(
        control_plane: ControlPlane, node: KubeletNode, dag_namespace: tuple[str, str], capfd):
    namespace, user = dag_namespace
    controller = RealKubeflowController(control_plane, node, namespace, "pytorchjobs")
    controller.submit(JOB, {"Master": 1, "Worker": 1}, container="pytorch")
    controller.create_pods()
    controller.run_all()
    controller.conditions(("Created", "PyTorchJobCreated", ""), ("Running", "PyTorchJobRunning", ""))

    def script(c: RealKubeflowController) -> None:
        wait_until(lambda: requests_of(control_plane, user, "watch", "pytorchjobs"), timeout=60, interval=0.05)
        succeed(c)

    controller.play(script)
    run, states = run_dag_at("sensor_pytorchjob_deferrable")
    controller.check()

    assert states == {"wait": "success"}
    assert xcom(run, "wait", "metrics") == DOCUMENT["metrics"]
    assert "waiting in the triggerer" in capfd.readouterr().out
    # The kind's watch, shared in the namespace: no fieldSelector of one job.
    watches = requests_of(control_plane, user, "watch", "pytorchjobs")
    assert watches and all("fieldSelector" not in query_of(e) for e in watches)
    assert controller.get(JOB) is not None  # a sensor deletes nothing
    assert control_plane.refused(user) == []


@pytest.mark.parametrize("dag_namespace", ["sensor_pytorchjob_suspended"], indirect=True)
def test_a_pytorchjob_sensor_lists_no_pods_while_the_job_is_suspended_then_succeeds(
        control_plane: ControlPlane, node: KubeletNode, dag_namespace: tuple[str, str]):
    namespace, user = dag_namespace
    controller = RealKubeflowController(control_plane, node, namespace, "pytorchjobs")
    controller.submit(JOB, {"Master": 1, "Worker": 1}, container="pytorch")
    controller.conditions(("Created", "PyTorchJobCreated", ""), ("Suspended", "PyTorchJobSuspended", ""))
    counts: dict[str, int] = {}

    def script(c: RealKubeflowController) -> None:
        # Five pokes of the suspended job (GETs of the object), and no pod LIST meanwhile.
        wait_until(lambda: len(requests_of(control_plane, user, "get", "pytorchjobs")) >= 5, timeout=60,
                   interval=0.05)
        counts["suspended"] = len(requests_of(control_plane, user, "list", "pods"))
        c.conditions(("Created", "PyTorchJobCreated", ""), ("Suspended", "PyTorchJobResumed", ""), false=("Suspended",))
        c.create_pods()
        wait_until(lambda: requests_of(control_plane, user, "list", "pods"), timeout=60, interval=0.05)
        c.run_all()
        succeed(c)

    controller.play(script)
    run, states = run_dag_at("sensor_pytorchjob_suspended")
    controller.check()

    assert states == {"wait": "success"}
    assert counts["suspended"] == 0
    assert xcom(run, "wait", "metrics") == DOCUMENT["metrics"]
    assert control_plane.refused(user) == []

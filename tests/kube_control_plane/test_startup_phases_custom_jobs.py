"""A PyTorchJob's and a TrainJob's startup phases against the real control plane, sync and deferred: held back
(suspended, as Kueue holds a job) then admitted, their pods made by the stand-in controllers and bound by the real
scheduler. The ``job`` XCom's phases are the object's and the pods' own timestamps, read by the test from the API
server, and the master's log timestamps."""

from __future__ import annotations

import time

import pytest

from airflow_distributed.jobstate.startup import NEVER_SUSPENDED, epoch
from airflow_distributed.replica.live_report import record_line
from tests.helpers import run_dag_at, wait_until, xcom
from tests.integration.kubeflow_controller import GROUP
from tests.kube_control_plane.control_plane import NOTHING, ControlPlane
from tests.kube_control_plane.custom_jobs import RealKubeflowController, RealTrainerController
from tests.kube_control_plane.kubelet import KubeletNode
from tests.kubernetes_helpers import DOCUMENT, comes_to


@pytest.mark.usefixtures("airflow_db")
@pytest.mark.parametrize("dag_namespace", ["kubeflow_suspended", "kubeflow_suspended_deferrable"], indirect=True)
def test_a_pytorchjobs_startup_phases_are_its_admission_and_its_pods_own_timestamps(
        control_plane: ControlPlane, node: KubeletNode, dag_namespace: tuple[str, str]):
    namespace, user = dag_namespace
    seen: dict = {}

    def status(*conditions: dict) -> None:
        controller.emu.update_status("pytorchjobs", namespace, controller.name, {"conditions": list(conditions)},
                                     group=GROUP, version="v1")

    def condition(kind: str, state: str, reason: str) -> dict:
        stamp = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
        return {"type": kind, "status": state, "reason": reason, "message": "", "lastUpdateTime": stamp,
                "lastTransitionTime": stamp}

    def script(controller: RealKubeflowController) -> None:
        controller.wait_for_job()
        created = condition("Created", "True", "PyTorchJobCreated")
        status(created, condition("Suspended", "True", "PyTorchJobSuspended"))
        wait_until(controller.watched, timeout=60, interval=0.05)
        time.sleep(1.1)  # held back a second and more: the API's times have whole seconds
        resumed = condition("Suspended", "False", "PyTorchJobResumed")
        status(created, resumed)
        controller.create_pods()
        controller.run_all()
        master = controller.pods["master-0"]
        seen["first_line"] = time.time() + 0.5
        node.append_log(namespace, master, "loading data", container="pytorch", at=seen["first_line"])
        seen["first_progress"] = seen["first_line"] + 1.0
        node.append_log(namespace, master, record_line({"progress": {"step": 1, "total": 3}}) or "",
                        container="pytorch", at=seen["first_progress"])
        status(created, resumed, condition("Running", "True", "PyTorchJobRunning"))
        time.sleep(2.0)  # the lines' times are past: the follower has them before the master ends
        seen["job"] = controller.get()
        seen["pods"] = {name: node.get("pods", namespace, name) for name in controller.pods.values()}
        controller.succeed("master-0", DOCUMENT)  # its container's start is kept in its terminated state
        status(created, resumed, {**condition("Running", "False", "PyTorchJobRunning")},
               condition("Succeeded", "True", "PyTorchJobSucceeded"))

    controller = RealKubeflowController(control_plane, node, namespace, "pytorchjobs").play(script)
    run, states = run_dag_at(namespace.replace("-", "_"))
    controller.check()

    assert states == {"train": "success"}
    startup = xcom(run, "train", "job")["startup"]
    job, pods = seen["job"], seen["pods"]
    created = epoch(job["metadata"]["creationTimestamp"])  # the PyTorchJob's creation is the job's
    assert epoch(startup["created_at"]) == created
    admitted = next(c["lastTransitionTime"] for c in job["status"]["conditions"] if c["type"] == "Suspended")
    assert startup["job"]["admitted"] == round(epoch(admitted) - created, 3) >= 1.0
    check_against_pods(startup, pods, "pytorch", controller.pods["master-0"], seen["first_progress"], created)
    comes_to(lambda: control_plane.left(namespace), NOTHING, timeout=60)
    assert control_plane.refused(user) == []


@pytest.mark.usefixtures("airflow_db")
@pytest.mark.parametrize("dag_namespace", ["trainjob_suspended", "trainjob_suspended_deferrable"], indirect=True)
def test_a_trainjobs_startup_phases_are_its_admission_and_its_node_pods_own_timestamps(
        control_plane: ControlPlane, node: KubeletNode, dag_namespace: tuple[str, str]):
    namespace, user = dag_namespace
    seen: dict = {}

    def script(controller: RealTrainerController) -> None:
        controller.wait_for_job()
        controller.condition("Suspended", "True", "Suspended", "TrainJob is suspended")
        wait_until(controller.watched, timeout=60, interval=0.05)
        time.sleep(1.1)  # held back a second and more: the API's times have whole seconds
        controller.condition("Suspended", "False", "Resumed", "TrainJob is resumed")
        controller.create_pods()
        controller.run_all()
        controller.write_status(active=1)
        seen["first_line"] = time.time() + 0.5
        node.append_log(namespace, controller.pods[0], "loading data", container="node", at=seen["first_line"])
        seen["first_progress"] = seen["first_line"] + 1.0
        node.append_log(namespace, controller.pods[0], record_line({"progress": {"step": 1, "total": 3}}) or "",
                        container="node", at=seen["first_progress"])
        time.sleep(2.0)  # the lines' times are past: the follower has them before node 0 ends
        seen["job"] = controller.get()
        seen["pods"] = {name: node.get("pods", namespace, name) for name in controller.pods.values()}
        controller.succeed(0, DOCUMENT)
        controller.succeed(1)
        controller.succeed(2)
        controller.condition("Complete", "True", "AllJobsCompleted", "jobset completed successfully")

    controller = RealTrainerController(control_plane, node, namespace).play(script)
    run, states = run_dag_at(namespace.replace("-", "_"))
    controller.check()

    assert states == {"train": "success"}
    startup = xcom(run, "train", "job")["startup"]
    created = epoch(seen["job"]["metadata"]["creationTimestamp"])  # the TrainJob's creation is the job's
    assert epoch(startup["created_at"]) == created
    admitted = next(c["lastTransitionTime"] for c in seen["job"]["status"]["conditions"] if c["type"] == "Suspended")
    assert startup["job"]["admitted"] == round(epoch(admitted) - created, 3) >= 1.0
    check_against_pods(startup, seen["pods"], "node", controller.pods[0], seen["first_progress"], created)
    comes_to(lambda: control_plane.left(namespace), NOTHING, timeout=60)
    assert control_plane.refused(user) == []


def check_against_pods(startup: dict, pods: dict, container: str, master: str, first_progress: float,
                       created: float) -> None:
    """Each replica's phases are its pod's own times; the master's rendezvous its first progress record's."""
    assert set(startup["replicas"]) == set(pods)
    for name, pod in pods.items():
        row = startup["replicas"][name]
        scheduled = next(c["lastTransitionTime"] for c in pod["status"]["conditions"]
                         if c["type"] == "PodScheduled" and c["status"] == "True")
        started = next(s["state"]["running"]["startedAt"] for s in pod["status"]["containerStatuses"]
                       if s["name"] == container)
        assert (row["created"], row["admitted"], row["scheduled"], row["image_pulled"], row["running"]) == (
            round(epoch(pod["metadata"]["creationTimestamp"]) - created, 3), startup["job"]["admitted"],
            round(epoch(scheduled) - created, 3), None, round(epoch(started) - created, 3))
        expected = (round(first_progress - created, 3), "progress") if name == master else (None, None)
        assert (row["rendezvous"], row["rendezvous_by"]) == expected
    assert (startup["job"]["rendezvous"], startup["rendezvous_by"]) == (
        startup["replicas"][master]["rendezvous"], "progress")
    assert startup["job"]["running"] == max(row["running"] for row in startup["replicas"].values())
    assert set(startup["unknown"]) == {"image_pulled"} and NEVER_SUSPENDED not in startup["unknown"].values()

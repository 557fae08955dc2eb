"""The failure paths and the suspension of the ``kubeflow`` and ``trainjob`` backends against the real control
plane: the same DAGs and stand-in controllers as the emulator's tests (``tests/integration/test_kubeflow_backend.py``,
``test_trainjob_backend.py``), over the real API, the task bound to exactly its backend's Roles of docs/rbac.yaml.

A failed replica fails the task naming it and keeps the job for a look; a replica whose image cannot be pulled
fails the task and the job is deleted (the real garbage collector taking its pods); a suspended job (Kueue holding
it) is waited for without a LIST of its pods until it is resumed. The LISTs are counted from the audit log."""

from __future__ import annotations

import re
import time
from urllib.parse import parse_qs, urlsplit

import pytest

from tests.helpers import run_dag_at, wait_until, xcom
from tests.integration import trainjob_controller as trainjob
from tests.integration.kubeflow_controller import GROUP
from tests.kube_control_plane.control_plane import NOTHING, ControlPlane
from tests.kube_control_plane.custom_jobs import RealKubeflowController, RealTrainerController
from tests.kube_control_plane.kubelet import KubeletNode
from tests.kubernetes_helpers import DOCUMENT, comes_to, failure_line

pytestmark = [pytest.mark.usefixtures("airflow_db")]

IMAGE = "registry.example.com/trainer:1.0"
PULL_ERROR = f'rpc error: code = NotFound desc = failed to pull image "{IMAGE}": not found'


def pod_lists(plane: ControlPlane, user: str, label: str) -> int:
    """The task's LISTs of its job's pods (selected by ``label``), not its watches nor the read of node 0."""
    seen = set()
    for event in plane.audit_events(user):
        if event["verb"] != "list" or (event.get("objectRef") or {}).get("resource") != "pods":
            continue
        selector = "".join(parse_qs(urlsplit(event["requestURI"]).query).get("labelSelector", []))
        if label in selector and "job-completion-index" not in selector:
            seen.add(event["auditID"])
    return len(seen)


def objects_left(plane: ControlPlane, namespace: str, group: str, version: str, plural: str) -> list[str]:
    items = plane.request("GET", f"/apis/{group}/{version}/namespaces/{namespace}/{plural}")["items"]
    return [o["metadata"]["name"] for o in items]


# ---------------------------------------------------------------------------------------------- kubeflow

KUBEFLOW_PODS = "training.kubeflow.org/job-name"


def pytorchjobs_left(plane: ControlPlane, namespace: str) -> list[str]:
    return objects_left(plane, namespace, GROUP, "v1", "pytorchjobs")


@pytest.mark.parametrize("dag_namespace", ["kubeflow_failure"], indirect=True)
def test_a_failed_pytorchjob_fails_the_task_naming_the_replica_and_its_last_try_deletes_the_job(
        control_plane: ControlPlane, node: KubeletNode, dag_namespace: tuple[str, str], capfd):
    namespace, user = dag_namespace

    def script(controller: RealKubeflowController) -> None:
        controller.start()
        controller.log("worker-1", "Traceback (most recent call last):", "RuntimeError: NCCL error",
                       container="pytorch")
        controller.fail("worker-1", 3)
        controller.conditions(("Created", "PyTorchJobCreated", ""), ("Running", "PyTorchJobRunning", ""),
                              ("Failed", "PyTorchJobFailed", f"PyTorchJob {controller.name} is failed because 1 "
                                                             "Worker replica(s) failed."))

    controller = RealKubeflowController(control_plane, node, namespace, "pytorchjobs").play(script)
    run, states = run_dag_at("kubeflow_failure")
    controller.check()

    assert states == {"train": "failed"}
    worker = controller.pods["worker-1"]
    out = capfd.readouterr().out
    assert "PyTorchJobFailed: PyTorchJob" in out and "1 Worker replica(s) failed" in out
    assert f"replica {worker} exited with code 3" in out
    assert "RuntimeError: NCCL error" in out  # the failed replica's last lines, through the pods/log proxy
    record = xcom(run, "train", "job")
    assert record["state"] == "failed" and record["backend"] == "kubeflow"
    assert {r["name"]: (r["state"], r["exit_code"]) for r in record["replicas"]}[worker] == ("failed", 3)
    # Default after the task's last try (no retries): the object is deleted, its pods with it; nothing waits for a
    # try that never comes.
    assert "the job was deleted" in out
    comes_to(lambda: pytorchjobs_left(control_plane, namespace), [], timeout=60)
    comes_to(lambda: control_plane.left(namespace), NOTHING, timeout=60)
    assert control_plane.refused(user) == []


@pytest.mark.parametrize(("dag_namespace", "reason"), [
    ("kubeflow_image_pull", "ErrImagePull"),
    ("kubeflow_image_pull_deferrable", "ErrImagePull"),
    ("kubeflow_invalid_image", "InvalidImageName"),
    ("kubeflow_image_pull_grace_over", "ImagePullBackOff"),
], indirect=["dag_namespace"])
def test_a_replica_whose_image_cannot_be_pulled_fails_the_task_and_the_job_is_deleted_with_its_pods(
        control_plane: ControlPlane, node: KubeletNode, dag_namespace: tuple[str, str], reason: str, capfd):
    # The PyTorchJob stays "Created" (its status never tells a failed pull); only the pods do.
    namespace, user = dag_namespace

    def script(controller: RealKubeflowController) -> None:
        controller.wait_for_job()
        controller.create_pods()
        controller.conditions(("Created", "PyTorchJobCreated", ""))
        for key in ("master-0", "worker-0"):
            node.run_pod(namespace, controller.pods[key])
        node.pending_pod(namespace, controller.pods["worker-1"], reason=reason, message=PULL_ERROR)

    controller = RealKubeflowController(control_plane, node, namespace, "pytorchjobs").play(script)
    run, states = run_dag_at(namespace.replace("-", "_"))
    controller.check()

    assert states == {"train": "failed"}
    line = failure_line(capfd.readouterr().out)
    what = "is not a valid image name" if reason == "InvalidImageName" else "could not be pulled"
    # Worded as on backend="kubernetes": the same ending reads the same.
    assert re.search(r"failed after \d+\.\ds: " + re.escape(
        f'replica {controller.pods["worker-1"]}: image "{IMAGE}" {what} ({reason}: {PULL_ERROR}); '
        "the job was deleted"), line)
    assert "execution_timeout" not in line and "did not start" not in line
    assert xcom(run, "train", "job")["state"] == "failed"
    assert pod_lists(control_plane, user, KUBEFLOW_PODS) >= 1
    # The Kubeflow operator would have kept the pods waiting for the image: the task deleted the job, the garbage
    # collector its pods.
    assert pytorchjobs_left(control_plane, namespace) == []
    control_plane.assert_clean(namespace, user)


@pytest.mark.parametrize("dag_namespace", ["kubeflow_suspended", "kubeflow_suspended_deferrable"], indirect=True)
def test_a_suspended_pytorchjob_has_its_pods_listed_only_once_it_is_resumed_then_completes(
        control_plane: ControlPlane, node: KubeletNode, dag_namespace: tuple[str, str], capfd):
    namespace, user = dag_namespace
    counts: dict[str, int] = {}
    suspended = ("Suspended", "PyTorchJobSuspended", "PyTorchJob is suspended.")

    def script(controller: RealKubeflowController) -> None:
        controller.wait_for_job()
        # Kueue holds it: the operator says Suspended and makes no pods.
        controller.conditions(("Created", "PyTorchJobCreated", ""), suspended)
        # The task watches it: it saw the suspension in its LIST, or sees it as this watch's first event.
        wait_until(controller.watched, timeout=60, interval=0.05)
        counts["seen"] = pod_lists(control_plane, user, KUBEFLOW_PODS)
        time.sleep(2.5)  # many pending_pods_interval (0.2 s), and past the 1 s a watch is cut to while pods are awaited
        counts["suspended"] = pod_lists(control_plane, user, KUBEFLOW_PODS) - counts["seen"]
        controller.conditions(("Created", "PyTorchJobCreated", ""), ("Suspended", "PyTorchJobResumed", ""),
                              false=("Suspended",))
        # Resumed: the pods are listed again at once (the resume event ends the task's long watch).
        wait_until(lambda: pod_lists(control_plane, user, KUBEFLOW_PODS) > counts["seen"], timeout=60,
                   interval=0.05)
        controller.create_pods()
        controller.run_all()
        controller.conditions(("Created", "PyTorchJobCreated", ""), ("Running", "PyTorchJobRunning", ""))
        controller.succeed("master-0", DOCUMENT)
        controller.conditions(("Created", "PyTorchJobCreated", ""), ("Running", "PyTorchJobRunning", ""),
                              ("Succeeded", "PyTorchJobSucceeded", "done"))

    controller = RealKubeflowController(control_plane, node, namespace, "pytorchjobs").play(script)
    run, states = run_dag_at(namespace.replace("-", "_"))
    controller.check()

    assert states == {"train": "success"}
    assert counts["suspended"] == 0
    assert counts["seen"] <= 1  # at most the first look, made before the operator said Suspended
    assert xcom(run, "train", "metrics") == DOCUMENT["metrics"]
    if namespace == "kubeflow-suspended":  # the task's log says why it waits
        assert "PyTorchJob is suspended." in capfd.readouterr().out
    comes_to(lambda: control_plane.left(namespace), NOTHING, timeout=60)
    assert pytorchjobs_left(control_plane, namespace) == []
    assert control_plane.refused(user) == []


# ---------------------------------------------------------------------------------------------- trainjob

TRAINJOB_PODS = "jobset.sigs.k8s.io/jobset-name"


def trainjobs_left(plane: ControlPlane, namespace: str) -> list[str]:
    return objects_left(plane, namespace, trainjob.GROUP, trainjob.VERSION, trainjob.PLURAL)


@pytest.mark.parametrize("dag_namespace", ["trainjob_failure"], indirect=True)
def test_a_trainjob_node_that_fails_fails_the_task_naming_it_and_its_last_try_deletes_the_trainjob(
        control_plane: ControlPlane, node: KubeletNode, dag_namespace: tuple[str, str], capfd):
    namespace, user = dag_namespace

    def script(controller: RealTrainerController) -> None:
        controller.start()
        controller.log(2, "Traceback (most recent call last):", "RuntimeError: gloo connection reset")
        controller.fail(2, 3)
        controller.condition("Failed", "True", "FailedJobs", "jobset failed due to: 1 failed job(s) in node")

    controller = RealTrainerController(control_plane, node, namespace).play(script)
    run, states = run_dag_at("trainjob_failure")
    controller.check()

    assert states == {"train": "failed"}
    failed = controller.pods[2]
    out = capfd.readouterr().out
    assert "failed after" in out and "FailedJobs: jobset failed due to: 1 failed job(s) in node" in out
    assert f"replica {failed} exited with code 3" in out
    assert "RuntimeError: gloo connection reset" in out  # the failed node's last lines
    record = xcom(run, "train", "job")
    assert record["state"] == "failed" and record["backend"] == "trainjob"
    assert {r["name"]: (r["role"], r["index"], r["state"], r["exit_code"]) for r in record["replicas"]}[failed] == (
        "worker", 1, "failed", 3)
    # Default after the task's last try (no retries): the TrainJob is deleted, its node pods with it.
    assert "the job was deleted" in out
    comes_to(lambda: trainjobs_left(control_plane, namespace), [], timeout=60)
    comes_to(lambda: control_plane.left(namespace), NOTHING, timeout=60)
    assert control_plane.refused(user) == []


@pytest.mark.parametrize("dag_namespace", ["trainjob_suspended", "trainjob_suspended_deferrable"], indirect=True)
def test_a_suspended_trainjob_is_waited_for_without_pod_lists_until_it_is_resumed_and_completes(
        control_plane: ControlPlane, node: KubeletNode, dag_namespace: tuple[str, str], capfd):
    namespace, user = dag_namespace
    counts: dict[str, int] = {}

    def script(controller: RealTrainerController) -> None:
        controller.wait_for_job()
        # Kueue holds it: suspended, no pods.
        controller.condition("Suspended", "True", "Suspended", "TrainJob is suspended")
        wait_until(controller.watched, timeout=60, interval=0.05)
        counts["seen"] = pod_lists(control_plane, user, TRAINJOB_PODS)
        time.sleep(2.5)  # many pending_pods_interval (0.2 s), and past the 1 s a watch is cut to while pods are awaited
        counts["suspended"] = pod_lists(control_plane, user, TRAINJOB_PODS) - counts["seen"]
        controller.condition("Suspended", "False", "Resumed", "TrainJob is resumed")
        # Resumed: the node pods are listed again at once (the resume event ends the task's long watch).
        wait_until(lambda: pod_lists(control_plane, user, TRAINJOB_PODS) > counts["seen"], timeout=60,
                   interval=0.05)
        controller.create_pods()
        controller.run_all()
        controller.write_status(active=1)
        controller.succeed(0, DOCUMENT)
        controller.succeed(1)
        controller.succeed(2)
        controller.condition("Complete", "True", "AllJobsCompleted", "jobset completed successfully")

    controller = RealTrainerController(control_plane, node, namespace).play(script)
    run, states = run_dag_at(namespace.replace("-", "_"))
    controller.check()

    assert states == {"train": "success"}
    assert counts["suspended"] == 0
    assert counts["seen"] <= 1  # at most the first look, made before the controller said Suspended
    if namespace == "trainjob-suspended":  # the task's log says why it waits
        assert "is pending: TrainJob is suspended" in capfd.readouterr().out
    assert xcom(run, "train", "metrics") == DOCUMENT["metrics"]
    comes_to(lambda: control_plane.left(namespace), NOTHING, timeout=60)
    assert trainjobs_left(control_plane, namespace) == []
    assert control_plane.refused(user) == []

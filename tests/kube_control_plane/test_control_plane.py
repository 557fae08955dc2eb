"""The control plane and the test kubelet themselves: the real scheduler binds a pod to the node, the kubelet's
status writes and logs reach clients through the real API server, and deletion is finished by the kubelet."""

from __future__ import annotations

import pytest
from kubernetes import client

from tests.helpers import wait_until
from tests.kube_control_plane.control_plane import ControlPlane
from tests.kube_control_plane.kubelet import KubeletNode


def pod_body(name: str, cpu: str = "100m", gpus: int = 0) -> dict:
    limits = {"nvidia.com/gpu": str(gpus)} if gpus else {}
    return {"metadata": {"name": name}, "spec": {"restartPolicy": "Never", "containers": [{
        "name": "base", "image": "registry.example.com/trainer:1.0",
        "resources": {"requests": {"cpu": cpu, **limits}, "limits": limits}}]}}


def test_the_scheduler_binds_the_kubelet_plays_and_logs_go_through_the_api_server(
        control_plane: ControlPlane, node: KubeletNode, namespace: str):
    core = client.CoreV1Api(control_plane.admin)
    control_plane.request("POST", f"/api/v1/namespaces/{namespace}/pods", pod_body("p", gpus=2))
    node.run_pod(namespace, "p")
    node.append_log(namespace, "p", "one\ntwo\nthree")
    pod = core.read_namespaced_pod("p", namespace)
    assert pod.spec.node_name == node.name
    assert pod.status.phase == "Running"
    assert pod.status.pod_ip.startswith("10.244.")

    def log(**options) -> str:
        return core.read_namespaced_pod_log("p", namespace, _preload_content=False, **options).data.decode()

    assert log(container="base") == "one\ntwo\nthree\n"
    assert log(tail_lines=1) == "three\n"
    stamped = log(timestamps=True).splitlines()
    assert [line.split(" ", 1)[1] for line in stamped] == ["one", "two", "three"]

    node.fail_pod(namespace, "p", exit_code=137, reason="OOMKilled")
    state = core.read_namespaced_pod("p", namespace).status.container_statuses[0].state.terminated
    assert (state.exit_code, state.reason) == (137, "OOMKilled")
    # A follow of an ended container returns what there is and ends.
    assert log(follow=True) == "one\ntwo\nthree\n"

    # Deletion is two-phase on a real server: the kubelet finishes it.
    core.delete_namespaced_pod("p", namespace)
    wait_until(lambda: not core.list_namespaced_pod(namespace).items, timeout=30, interval=0.1)


def test_a_pod_asking_for_more_than_the_node_has_is_left_unschedulable_by_the_real_scheduler(
        control_plane: ControlPlane, node: KubeletNode, namespace: str):
    core = client.CoreV1Api(control_plane.admin)
    control_plane.request("POST", f"/api/v1/namespaces/{namespace}/pods", pod_body("big", gpus=64))

    def condition():
        conditions = core.read_namespaced_pod("big", namespace).status.conditions or []
        return next((c for c in conditions if c.type == "PodScheduled" and c.status == "False"), None)

    scheduled = wait_until(condition, timeout=30, interval=0.1)
    assert scheduled.reason == "Unschedulable"
    assert "Insufficient nvidia.com/gpu" in scheduled.message


def test_the_audit_log_names_a_request_the_role_refuses(
        control_plane: ControlPlane, namespace: str, task_kubeconfig: str, task_user: str):
    """What the backend tests' ``refused(...) == []`` relies on: a refused request of the task is in the audit log."""
    core = client.CoreV1Api(control_plane.api_client(task_kubeconfig))
    core.list_namespaced_pod(namespace)
    with pytest.raises(client.ApiException) as refused:
        core.list_namespaced_secret(namespace)
    assert refused.value.status == 403
    assert control_plane.refused(task_user) == [f"list /api/v1/namespaces/{namespace}/secrets -> 403"]

"""``queue_timeout`` on the Kubeflow backends' waits, against the real API server: a job Kueue keeps suspended
(``runPolicy.suspend``, as its webhook leaves a queued job), whose pod the real scheduler leaves Unschedulable, or
whose PodGroup its gang scheduler has not admitted (the operator creates no pod before: Volcano's, served here by
its CRD) counts as queued, and past ``queue_timeout`` the wait ends with a ``queue`` verdict naming why, in the task
and in the triggerer."""

from __future__ import annotations

import asyncio
import json
import re
import time

from kubernetes import client

from airflow_distributed.hooks.kubeflow import KubeflowJobHook
from airflow_distributed.jobstate.outcome import describe
from airflow_distributed.jobstate.pending_pods import QUEUE_TIMED_OUT
from airflow_distributed.jobstate.watch_timings import WatchTimings
from airflow_distributed.manifests.kubeflow_kinds import KINDS, kubeflow_resource
from airflow_distributed.manifests.kubeflow_status import pod_group_of
from airflow_distributed.triggers.kubeflow import KubeflowJobTrigger
from tests.helpers import wait_until
from tests.integration.kubeflow_controller import KubeflowController
from tests.integration.test_kubernetes_rbac import role
from tests.kube_control_plane.control_plane import TASK_ACCOUNT, ControlPlane
from tests.kube_control_plane.kubelet import KubeletNode


def _setup(control_plane: ControlPlane, namespace: str, *, suspend: bool, gpus: int = 0, gang: str | None = None):
    config = control_plane.bind_role(namespace, [role("airflow-distributed"), role("airflow-distributed-kubeflow")],
                                     TASK_ACCOUNT)
    hook = KubeflowJobHook(kubernetes_conn_id=None, config_file=config, client_configuration=client.Configuration())
    resource, kind = kubeflow_resource("pytorch"), KINDS["pytorch"]
    name = "queued"
    container = {"name": kind.container, "image": "trainer:1"}
    if gpus:
        container["resources"] = {"requests": {"nvidia.com/gpu": str(gpus)}, "limits": {"nvidia.com/gpu": str(gpus)}}
    body = {"apiVersion": kind.api_version, "kind": kind.kind,
            "metadata": {"name": name, "labels": {"airflow-distributed/job": name}},
            "spec": {kind.replica_specs_key: {kind.master_type: {"replicas": 1, "template": {"spec": {
                "containers": [container]}}}}}}
    if suspend:
        body["spec"]["runPolicy"] = {"suspend": True}
    if gang is not None:  # as the backend's manifest of gang_scheduling="volcano" reads
        body["spec"]["runPolicy"] = {"schedulingPolicy": {"minAvailable": 1}}
        body["spec"][kind.replica_specs_key][kind.master_type]["template"]["spec"]["schedulerName"] = gang
    hook.submit_kubeflow_job(namespace, resource, body)
    return config, hook, resource, name


def test_a_job_kueue_keeps_suspended_past_queue_timeout_fails_as_not_scheduled_in_the_task(
        control_plane: ControlPlane, node: KubeletNode, namespace: str):
    _, hook, resource, name = _setup(control_plane, namespace, suspend=True)
    outcome = hook.wait_for_kubeflow_job(namespace, resource, name, queue_timeout=3)
    assert (outcome.ending, outcome.replica, outcome.reason) == ("queue", None, "Suspended")
    assert describe(outcome, queue_timeout=3).startswith(
        "the job was not scheduled within 3s (queue_timeout): Suspended: the job is suspended")
    hook.delete_kubeflow_job(namespace, resource, name)


def _notes(capfd, start: str) -> list[str]:
    """The task log's notes on why the job waits for capacity (``pending_pods``'s ``on_queue``), as logged."""
    out = capfd.readouterr().out
    return [line[line.index(start):] for line in out.splitlines() if start in line and " wait" in line]


#: An RFC 3339 time, as the cluster records a condition's transition.
SINCE = r"since \d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ: "


def test_a_job_kueue_keeps_suspended_past_queue_timeout_fails_in_the_triggerer(
        control_plane: ControlPlane, node: KubeletNode, namespace: str, monkeypatch, capfd):
    config, hook, resource, name = _setup(control_plane, namespace, suspend=True)
    monkeypatch.setenv("AIRFLOW_CONN_QUEUED_CLUSTER", json.dumps({"conn_type": "kubernetes",
                                                                  "extra": {"kube_config_path": config}}))
    trigger = KubeflowJobTrigger(job_name=name, namespace=namespace, group=resource.group, version=resource.version,
                                 plural=resource.plural, kubernetes_conn_id="queued_cluster", started_at=time.time(),
                                 queue_timeout=3)

    async def first() -> dict:
        return (await anext(trigger.run())).payload

    event = asyncio.run(first())
    assert (event["status"], event["reason"]) == ("failed", QUEUE_TIMED_OUT), event
    assert event["verdict"]["cause"] == "queue" and event["verdict"]["reason"] == "Suspended"
    # The triggerer's log (the task log's) told why the job waited and since when, once, not at every look.
    notes = _notes(capfd, f"pytorchjobs {namespace}/{name}: ")
    assert len(notes) == 1, notes
    assert re.search(r"the job waits to be admitted \(suspended\) " + SINCE + "Suspended: the job is suspended",
                     notes[0]), notes
    hook.delete_kubeflow_job(namespace, resource, name)


def test_a_job_whose_pod_the_real_scheduler_cannot_place_fails_past_queue_timeout_naming_its_reason(
        control_plane: ControlPlane, node: KubeletNode, namespace: str, capfd):
    _, hook, resource, name = _setup(control_plane, namespace, suspend=False, gpus=64)  # the node has 8
    controller = KubeflowController(node, namespace, resource.plural)  # type: ignore[arg-type]
    controller.job = controller.get(name)
    pods = controller.create_pods()
    pod = next(iter(pods.values()))
    wait_until(lambda: any(c["type"] == "PodScheduled" and c["status"] == "False" for c in
                           (node.get("pods", namespace, pod) or {}).get("status", {}).get("conditions") or []),
               timeout=30, interval=0.05)
    scheduled = next(c for c in node.get("pods", namespace, pod)["status"]["conditions"]
                     if c["type"] == "PodScheduled")
    outcome = hook.wait_for_kubeflow_job(namespace, resource, name, queue_timeout=3,
                                         watch_timings=WatchTimings(pending_pods_interval=0.5))
    assert (outcome.ending, outcome.replica, outcome.reason) == ("queue", pod, "Unschedulable")
    assert "Insufficient nvidia.com/gpu" in (outcome.message or "")
    # The task log told why the job waited, as the scheduler said, and since the scheduler's own time: once,
    # though the pods were listed several times.
    notes = _notes(capfd, f"job {namespace}/{name}: ")
    assert len(notes) == 1, notes
    since, message = scheduled["lastTransitionTime"], scheduled["message"]
    assert notes[0].startswith(f"job {namespace}/{name}: 1 of 1 replicas wait to be scheduled since {since}: "
                               f"{pod}: Unschedulable: {message}"), notes
    assert "Insufficient nvidia.com/gpu" in notes[0]
    hook.delete_kubeflow_job(namespace, resource, name)


#: Volcano's answer for a PodGroup it cannot admit, as its scheduler writes it.
NOT_ADMITTED = {"phase": "Pending", "conditions": [{
    "type": "Unschedulable", "status": "True", "reason": "NotEnoughResources", "transitionID": "1",
    "lastTransitionTime": "2026-11-25T15:02:11Z",
    "message": "1/1 tasks in gang unschedulable: pod group is not ready, 1 minAvailable"}]}


def _pod_group_not_admitted(control_plane: ControlPlane, namespace: str, name: str) -> None:
    """The PodGroup the Kubeflow operator makes for a gang-scheduled job, left Pending by Volcano."""
    ref = pod_group_of({"kind": "PyTorchJob", "metadata": {"name": name}, "spec": {
        "runPolicy": {"schedulingPolicy": {}},
        "pytorchReplicaSpecs": {"Master": {"template": {"spec": {"schedulerName": "volcano"}}}}}})
    assert ref is not None
    control_plane.install_crd(ref.group, ref.version, ref.plural, "PodGroup")
    path = f"/apis/{ref.group}/{ref.version}/namespaces/{namespace}/{ref.plural}"
    created = control_plane.request("POST", path, {"apiVersion": f"{ref.group}/{ref.version}", "kind": "PodGroup",
                                                   "metadata": {"name": name}, "spec": {"minMember": 1}})
    control_plane.request("PUT", f"{path}/{name}/status", {**created, "status": NOT_ADMITTED})


def test_a_job_whose_podgroup_is_not_admitted_is_queued_before_any_pod_exists_in_the_task(
        control_plane: ControlPlane, node: KubeletNode, namespace: str):
    _, hook, resource, name = _setup(control_plane, namespace, suspend=False, gang="volcano")
    _pod_group_not_admitted(control_plane, namespace, name)
    deadline = time.monotonic() + 30  # without the PodGroup's verdict the job would wait for ever: stopped here
    outcome = hook.wait_for_kubeflow_job(namespace, resource, name, queue_timeout=3,
                                         stopped=lambda: time.monotonic() > deadline)
    assert (outcome.ending, outcome.replica, outcome.reason) == ("queue", None, "NotEnoughResources"), outcome
    assert describe(outcome, queue_timeout=3).startswith(
        f"the job was not scheduled within 3s (queue_timeout): NotEnoughResources: PodGroup {name} is not admitted: "
        "1/1 tasks in gang unschedulable")
    # No pod existed: the PodGroup alone told that the job waits.
    assert control_plane.request("GET", f"/api/v1/namespaces/{namespace}/pods")["items"] == []
    hook.delete_kubeflow_job(namespace, resource, name)


def test_a_job_whose_podgroup_is_not_admitted_is_queued_before_any_pod_exists_in_the_triggerer(
        control_plane: ControlPlane, node: KubeletNode, namespace: str, monkeypatch):
    config, hook, resource, name = _setup(control_plane, namespace, suspend=False, gang="volcano")
    _pod_group_not_admitted(control_plane, namespace, name)
    monkeypatch.setenv("AIRFLOW_CONN_QUEUED_CLUSTER", json.dumps({"conn_type": "kubernetes",
                                                                  "extra": {"kube_config_path": config}}))
    trigger = KubeflowJobTrigger(job_name=name, namespace=namespace, group=resource.group, version=resource.version,
                                 plural=resource.plural, kubernetes_conn_id="queued_cluster", started_at=time.time(),
                                 queue_timeout=3, execution_deadline=time.time() + 30)

    async def first() -> dict:
        return (await anext(trigger.run())).payload

    event = asyncio.run(first())
    assert (event["status"], event["reason"]) == ("failed", QUEUE_TIMED_OUT), event
    assert event["verdict"]["cause"] == "queue" and event["verdict"]["reason"] == "NotEnoughResources"
    hook.delete_kubeflow_job(namespace, resource, name)

"""The kubeflow backend's hook against a real API server: a job of each Kubeflow kind (TFJob, PyTorchJob, MXJob,
MPIJob, XGBoostJob, PaddleJob; their CRDs installed on the server) submitted,
read back on a retry's 409, watched until the stand-in controller says Succeeded, its master's output read and the
job deleted, the real garbage collector deleting the pods it owns. The task talks as a service account bound to
exactly the ``airflow-distributed`` and ``airflow-distributed-kubeflow`` Roles of docs/rbac.yaml."""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Iterator

import pytest
from kubernetes import client

from airflow_distributed.hooks.kubeflow import KubeflowJobHook
from airflow_distributed.manifests.kubeflow_kinds import KINDS, kubeflow_resource
from airflow_distributed.triggers.kubeflow import KubeflowJobTrigger
from tests.helpers import wait_until
from tests.integration.kubeflow_controller import KubeflowController
from tests.integration.test_kubernetes_rbac import role
from tests.kube_control_plane.control_plane import NOTHING, TASK_ACCOUNT, ControlPlane
from tests.kube_control_plane.fault_proxy import FaultProxy
from tests.kube_control_plane.kubelet import KubeletNode
from tests.kubernetes_helpers import comes_to


@pytest.fixture
def kubeflow_kubeconfig(control_plane: ControlPlane, namespace: str) -> Iterator[str]:
    """The Kubeflow kinds' CRDs are installed with the control plane (the conftest)."""
    yield control_plane.bind_role(namespace, [role("airflow-distributed"), role("airflow-distributed-kubeflow")],
                                  TASK_ACCOUNT)


@pytest.mark.parametrize("framework", sorted(KINDS))
def test_a_job_of_each_kind_is_submitted_watched_to_success_read_and_deleted_with_its_pods(
        control_plane: ControlPlane, node: KubeletNode, namespace: str, kubeflow_kubeconfig: str, task_user: str,
        framework: str):
    hook = KubeflowJobHook(kubernetes_conn_id=None, config_file=kubeflow_kubeconfig,
                           client_configuration=client.Configuration())
    resource, kind = kubeflow_resource(framework), KINDS[framework]
    name = f"job-{framework}"
    body = {"apiVersion": kind.api_version, "kind": kind.kind,
            "metadata": {"name": name, "labels": {"airflow-distributed/job": name}},
            "spec": {kind.replica_specs_key: {kind.master_type: {"replicas": 1, "template": {"spec": {
                "containers": [{"name": kind.container, "image": "trainer:1"}]}}}}}}
    hook.submit_kubeflow_job(namespace, resource, body)
    assert hook.submit_kubeflow_job(namespace, resource, body).reattached == "pending"
    controller = KubeflowController(node, namespace, resource.plural)  # type: ignore[arg-type]
    controller.job = controller.get(name)
    controller.create_pods()

    def finish(controller: KubeflowController) -> None:
        controller.run_all()
        wait_until(lambda: any(e["verb"] == "watch" and (e.get("objectRef") or {}).get("resource") == resource.plural
                               for e in control_plane.audit_events(task_user)), timeout=60, interval=0.05)
        controller.succeed(f"{kind.master_type.lower()}-0", {"metrics": {"loss": 0.1}})
        controller.conditions(("Succeeded", "Succeeded", ""))

    controller.play(finish)
    outcome = hook.wait_for_kubeflow_job(namespace, resource, name)
    controller.check(timeout=60)
    assert outcome.ending == "succeeded"
    assert hook.kubeflow_output(namespace, outcome.job_object or {}) == '{"metrics": {"loss": 0.1}}'

    hook.delete_kubeflow_job(namespace, resource, name)
    comes_to(lambda: control_plane.left(namespace), NOTHING, timeout=60)
    assert node.get(resource.plural, namespace, name, resource.group, resource.version) is None
    assert control_plane.refused(task_user) == []


def test_a_kubeflow_wait_across_a_watch_cut_mid_stream_resumes_without_a_new_list(
        control_plane: ControlPlane, node: KubeletNode, namespace: str, kubeflow_kubeconfig: str, task_user: str):
    resource, kind = kubeflow_resource("pytorch"), KINDS["pytorch"]
    name = "job-cut"
    body = {"apiVersion": kind.api_version, "kind": kind.kind,
            "metadata": {"name": name, "labels": {"airflow-distributed/job": name}},
            "spec": {kind.replica_specs_key: {kind.master_type: {"replicas": 1, "template": {"spec": {
                "containers": [{"name": kind.container, "image": "trainer:1"}]}}}}}}
    with FaultProxy(control_plane) as proxy:
        hook = KubeflowJobHook(kubernetes_conn_id=None, config_file=proxy.kubeconfig(kubeflow_kubeconfig),
                               client_configuration=client.Configuration())
        hook.submit_kubeflow_job(namespace, resource, body)
        controller = KubeflowController(node, namespace, resource.plural)  # type: ignore[arg-type]
        controller.job = controller.get(name)
        controller.create_pods()

        def jobs_requests(verb: str) -> int:
            return len({e["auditID"] for e in control_plane.audit_events(task_user) if e["verb"] == verb
                        and (e.get("objectRef") or {}).get("resource") == resource.plural})

        def finish(controller: KubeflowController) -> None:
            controller.run_all()
            wait_until(lambda: proxy.open_watches() >= 1, timeout=60, interval=0.05)
            assert proxy.drop_watches() == 1
            wait_until(lambda: jobs_requests("watch") >= 2, timeout=60, interval=0.05)
            controller.succeed(f"{kind.master_type.lower()}-0", {"metrics": {"loss": 0.1}})
            controller.conditions(("Succeeded", "Succeeded", ""))

        controller.play(finish)
        outcome = hook.wait_for_kubeflow_job(namespace, resource, name)
        controller.check(timeout=60)
        assert outcome.ending == "succeeded"
        assert jobs_requests("list") == 1  # resumed from its resourceVersion, not listed again
        hook.delete_kubeflow_job(namespace, resource, name)
    control_plane.assert_clean(namespace, task_user)


@pytest.mark.usefixtures("airflow_db")
def test_a_job_that_does_not_exist_is_deleted_for_the_sync_wait_and_the_trigger_alike(
        control_plane: ControlPlane, namespace: str, kubeflow_kubeconfig: str, task_user: str):
    # One missing-object rule (ObjectWatch): what a consistent read does not find was deleted. The trigger's shared
    # watch starts from a cache, so it asks the server before it says so, instead of waiting to its deadline.
    resource = kubeflow_resource("pytorch")
    hook = KubeflowJobHook(kubernetes_conn_id=None, config_file=kubeflow_kubeconfig,
                           client_configuration=client.Configuration())
    assert hook.wait_for_kubeflow_job(namespace, resource, "never-created").ending == "deleted"

    connection = json.dumps({"conn_type": "kubernetes", "extra": {"kube_config_path": kubeflow_kubeconfig}})
    trigger = KubeflowJobTrigger(job_name="never-created", namespace=namespace, group=resource.group,
                                 version=resource.version, plural=resource.plural,
                                 kubernetes_conn_id="kubernetes_default", execution_deadline=time.time() + 60)

    async def first_event() -> dict:
        async for event in trigger.run():
            return event.payload
        raise AssertionError("the trigger ended without an event")

    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("AIRFLOW_CONN_KUBERNETES_DEFAULT", connection)
        event = asyncio.run(first_event())
    assert event["status"] == "deleted", event
    assert control_plane.refused(task_user) == []

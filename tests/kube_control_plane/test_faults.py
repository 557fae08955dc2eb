"""Faults a real server does not produce on demand, injected by a proxy in front of it (``fault_proxy``), lost answers
(the server did the create, its answer never came back) included: every other answer is the real server's. The task
talks through the proxy as the Role's service account."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.helpers import wait_until
from tests.kube_control_plane.control_plane import ControlPlane
from tests.kube_control_plane.fault_proxy import FaultProxy
from tests.kube_control_plane.kubelet import KubeletNode
from tests.kubernetes_helpers import DOCUMENT, Kubelet, make_job, new_hook


@pytest.fixture
def proxy(control_plane: ControlPlane) -> Iterator[FaultProxy]:
    with FaultProxy(control_plane) as running:
        yield running


def requests_of(control_plane: ControlPlane, user: str, verb: str, resource: str = "pods") -> int:
    """How many requests of ``user`` reached the real server (the audit log), by verb, on a collection."""
    return len({e["auditID"] for e in control_plane.audit_events(user) if e["verb"] == verb
                and (e.get("objectRef") or {}).get("resource") == resource})


def test_faults_on_submit_are_retried_and_the_real_server_creates_each_pod_once(
        control_plane: ControlPlane, node: KubeletNode, namespace: str, task_kubeconfig: str, task_user: str,
        proxy: FaultProxy):
    hook = new_hook(proxy.kubeconfig(task_kubeconfig))
    build, slots, name = make_job(namespace)
    proxy.inject_faults("POST", rf"/namespaces/{namespace}/pods$", [500, 429, 503], retry_after=0)
    hook.ensure_job(namespace, build(None), slots)
    assert [code for _, _, code in proxy.injected] == [500, 429, 503]
    assert requests_of(control_plane, task_user, "create") == len(slots)
    assert sorted(control_plane.left(namespace)["pods"]) == sorted(slot.name for slot in slots)

    hook.delete_job(namespace, name)
    control_plane.assert_clean(namespace, task_user)


def test_a_watch_cut_mid_stream_is_resumed_from_its_resource_version_without_a_new_list(
        control_plane: ControlPlane, node: KubeletNode, namespace: str, task_kubeconfig: str, task_user: str,
        proxy: FaultProxy):
    hook = new_hook(proxy.kubeconfig(task_kubeconfig))
    build, slots, name = make_job(namespace)
    hook.ensure_job(namespace, build(None), slots)
    lists = requests_of(control_plane, task_user, "list")

    def script(k: Kubelet) -> None:
        k.run_all()
        wait_until(lambda: proxy.open_watches() >= 1, timeout=60, interval=0.05)
        assert proxy.drop_watches() == 1
        wait_until(lambda: requests_of(control_plane, task_user, "watch") >= 2, timeout=60, interval=0.05)
        k.master_exits(0, document=DOCUMENT)

    kubelet = Kubelet(node, namespace).play(script)
    outcome = hook.wait_for_job(namespace, name, slots, startup_timeout=30)
    kubelet.check()
    assert outcome.succeeded
    assert requests_of(control_plane, task_user, "list") == lists + 1

    hook.delete_job(namespace, name)
    control_plane.assert_clean(namespace, task_user)


def test_a_create_whose_answer_was_lost_is_retried_meets_409_and_counts_as_done(
        control_plane: ControlPlane, node: KubeletNode, namespace: str, task_kubeconfig: str, task_user: str,
        proxy: FaultProxy):
    hook = new_hook(proxy.kubeconfig(task_kubeconfig))
    build, slots, name = make_job(namespace, environment={})  # the master alone
    # The real server creates the pod; its answer is lost (a 500 in its place): the retry meets 409 AlreadyExists.
    proxy.lose_answers("POST", rf"/namespaces/{namespace}/pods$", [500])
    handle = hook.ensure_job(namespace, build(None), slots)
    assert [code for _, _, code in proxy.injected] == [500]
    assert handle.created == 2  # the Service and ConfigMap; the pod was there when the retry met 409
    creates = [e for e in control_plane.audit_events(task_user) if e["verb"] == "create" and e["stage"] ==
               "ResponseComplete" and (e.get("objectRef") or {}).get("resource") == "pods"]
    assert sorted(e["responseStatus"]["code"] for e in creates) == [201, 409]
    assert control_plane.left(namespace)["pods"] == [slots[0].name]

    hook.delete_job(namespace, name)
    control_plane.assert_clean(namespace, task_user)

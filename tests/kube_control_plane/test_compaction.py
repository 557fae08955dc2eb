"""410 Gone from a real server: a watch resumed from a resourceVersion that etcd has compacted away is refused, and
the job's wait lists once more, then watches on to the right verdict.

A control plane of its own, whose apiserver serves pods without its watch cache (``--watch-cache-sizes=pods#0``):
each pod watch is then an etcd watch, and compacting etcd (what the apiserver does every 5 minutes) is what ends a
resourceVersion's life, as on a cluster whose watch cache has moved past it. The task talks through the fault proxy
(to cut its watch), as the service account bound to exactly the Role of docs/rbac.yaml."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.helpers import wait_until
from tests.integration.test_kubernetes_rbac import role
from tests.kube_control_plane.control_plane import NOTHING, TASK_ACCOUNT, ControlPlane, missing
from tests.kube_control_plane.fault_proxy import FaultProxy
from tests.kube_control_plane.kubelet import KubeletNode
from tests.kube_control_plane.test_faults import requests_of
from tests.kubernetes_helpers import DOCUMENT, Kubelet, comes_to, make_job, new_hook

NAMESPACE = "compacted"


@pytest.fixture(scope="module")
def uncached() -> Iterator[tuple[ControlPlane, KubeletNode]]:
    reason = missing()
    if reason is not None:
        pytest.skip(f"no real Kubernetes control plane: {reason}")
    with ControlPlane(apiserver_args=("--watch-cache-sizes=pods#0",)) as plane:
        node = KubeletNode(plane).start()
        try:
            yield plane, node
        finally:
            node.stop()
        assert node.errors == [], "\n".join(node.errors)


def test_a_watch_resumed_past_an_etcd_compaction_is_answered_410_then_listed_once_more_and_judged_right(
        uncached: tuple[ControlPlane, KubeletNode]):
    plane, node = uncached
    plane.create_namespace(NAMESPACE)
    kubeconfig = plane.bind_role(NAMESPACE, role("airflow-distributed"), TASK_ACCOUNT)
    user = f"system:serviceaccount:{NAMESPACE}:{TASK_ACCOUNT}"
    with FaultProxy(plane) as proxy:
        hook = new_hook(proxy.kubeconfig(kubeconfig))
        build, slots, name = make_job(NAMESPACE)
        hook.ensure_job(NAMESPACE, build(None), slots)

        def script(k: Kubelet) -> None:
            k.run_all()
            wait_until(lambda: proxy.open_watches() >= 1, timeout=60, interval=0.05)
            lists = requests_of(plane, user, "list")
            # The job is quiet: writes elsewhere move etcd on, and compaction drops the revision its watch is at.
            for _ in range(2):
                plane.request("POST", "/api/v1/namespaces/default/configmaps", {"metadata": {"generateName": "x-"}})
            plane.compact_etcd()
            assert proxy.drop_watches() == 1
            try:
                wait_until(lambda: requests_of(plane, user, "list") > lists, timeout=30, interval=0.05)
            finally:
                k.master_exits(0, document=DOCUMENT)  # the wait ends either way: the asserts below say why

        kubelet = Kubelet(node, NAMESPACE).play(script)
        outcome = hook.wait_for_job(NAMESPACE, name, slots, startup_timeout=30)
        kubelet.check()
        assert outcome.succeeded
        assert set(proxy.watch_errors) == {410}, proxy.watch_errors
        # One LIST to start, one after the 410: the watch went on from the new list's resourceVersion.
        assert requests_of(plane, user, "list") == 2
        hook.delete_job(NAMESPACE, name)
    comes_to(lambda: plane.left(NAMESPACE), NOTHING, timeout=60)
    assert plane.refused(user) == []

"""Faults on the waits, through the fault-injecting proxy in front of the real server (``fault_proxy``): the
trigger's wait (the deferrable path) rides out a watch cut mid-stream, error answers to its watch and a moment of
refused connections, resuming from its resourceVersion; a server that stays unreachable past ``reconnect_budget``
ends a DAG's wait (sync or deferred) saying why, and the job's pods are deleted once the server is back. Refused
here is refused: the proxy closes its port (``ECONNREFUSED``), where the emulator resets the connections it takes.
A task whose RoleBinding is removed while it waits is answered 403 by the real server itself at its next watch:
the wait ends at once as a permission problem. The task talks as the service account bound to exactly the Role of
docs/rbac.yaml."""

from __future__ import annotations

import json
import os
import time
import urllib.parse
from collections.abc import Iterator

import pytest

from tests.helpers import output_so_far, run_dag_at, wait_until
from tests.kube_control_plane.control_plane import ControlPlane
from tests.kube_control_plane.custom_jobs import RealKubeflowController
from tests.kube_control_plane.fault_proxy import FaultProxy
from tests.kube_control_plane.kubelet import KubeletNode
from tests.kubernetes_helpers import DOCUMENT, Kubelet, first_event, make_job, new_hook, trigger_for

pytestmark = [pytest.mark.usefixtures("airflow_db")]


@pytest.fixture
def proxy(control_plane: ControlPlane) -> Iterator[FaultProxy]:
    with FaultProxy(control_plane) as running:
        yield running


def requests_of(control_plane: ControlPlane, user: str, verb: str) -> int:
    """How many requests of ``user`` on pods reached the real server (the audit log), by verb."""
    return len({e["auditID"] for e in control_plane.audit_events(user) if e["verb"] == verb
                and (e.get("objectRef") or {}).get("resource") == "pods"})


def test_the_triggers_wait_rides_out_a_cut_watch_error_answers_and_refused_connections(
        control_plane: ControlPlane, node: KubeletNode, namespace: str, task_kubeconfig: str, task_user: str,
        proxy: FaultProxy):
    build, slots, name = make_job(namespace)
    new_hook(task_kubeconfig).ensure_job(namespace, build(None), slots)
    lists = requests_of(control_plane, task_user, "list")
    seen: dict[str, int] = {}

    def script(k: Kubelet) -> None:
        k.run_all()
        wait_until(lambda: proxy.open_watches() >= 1, timeout=60, interval=0.05)
        # The watch is cut; the next two watch requests are answered 500 and 429 (the server left alone).
        proxy.inject_faults("GET", rf"/namespaces/{namespace}/pods$", [500, 429])
        opened = proxy.watches_opened
        assert proxy.drop_watches() == 1
        # The watch after the two faults, not the cut one still leaving the proxy's books: a watch the server has
        # not answered yet would outlive the refusal below.
        wait_until(lambda: len(proxy.injected) == 2 and proxy.watches_opened > opened, timeout=60, interval=0.05)
        # Then the server is down for a moment: connections refused, within the reconnect budget.
        proxy.refuse_connections()
        seen["watches"] = requests_of(control_plane, task_user, "watch")
        time.sleep(1.5)
        opened = proxy.watches_opened
        proxy.accept_connections()
        wait_until(lambda: proxy.watches_opened > opened, timeout=60, interval=0.05)
        k.master_exits(0, document=DOCUMENT)

    kubelet = Kubelet(node, namespace).play(script)
    event = first_event(trigger_for(proxy.kubeconfig(task_kubeconfig), namespace, name, slots, watch_timings={
        "reconnect_delay": 0.1, "max_reconnect_delay": 0.3, "reconnect_budget": 60}))
    kubelet.check(timeout=60)

    assert (event["status"], event["verdict"]["state"]) == ("succeeded", "succeeded")
    assert [code for _, _, code in proxy.injected] == [500, 429]
    # Every watch after the faults resumed from a resourceVersion: one LIST in all, the trigger's first.
    assert requests_of(control_plane, task_user, "list") == lists + 1
    # The audit log is written as requests progress, not at once: the resumed watch's entry may come a moment later.
    wait_until(lambda: requests_of(control_plane, task_user, "watch") > seen["watches"], timeout=30, interval=0.2)
    new_hook(task_kubeconfig).delete_job(namespace, name)
    control_plane.assert_clean(namespace, task_user)


@pytest.mark.parametrize("dag_namespace", ["quiet_unreachable", "quiet_unreachable_deferrable"], indirect=True)
def test_a_server_that_stays_unreachable_ends_the_wait_after_the_reconnect_budget_saying_why(
        control_plane: ControlPlane, node: KubeletNode, dag_namespace: tuple[str, str], proxy: FaultProxy,
        monkeypatch, capfd):
    namespace, user = dag_namespace
    # kubernetes_default through the proxy (the DAGs' QUIET_TIMINGS: a reconnect_budget of 3 s).
    config = json.loads(os.environ["AIRFLOW_CONN_KUBERNETES_DEFAULT"])["extra"]["kube_config_path"]
    monkeypatch.setenv("AIRFLOW_CONN_KUBERNETES_DEFAULT", json.dumps(
        {"conn_type": "kubernetes", "extra": {"kube_config_path": proxy.kubeconfig(config)}}))

    def script(k: Kubelet) -> None:
        k.run_all()
        wait_until(lambda: proxy.open_watches() >= 1, timeout=60, interval=0.05)
        proxy.refuse_connections()
        try:
            # The wait gave up: the clean-up's first try is refused too (the sync task's), or the trigger said so.
            wait_until(lambda: any(line in output_so_far() for line in (
                "could not be reached again", "deleting job ")), timeout=60, interval=0.05)
        finally:
            proxy.accept_connections()  # back for the clean-up's retries

    kubelet = Kubelet(node, namespace).play(script)
    _, states = run_dag_at(namespace.replace("-", "_"))
    kubelet.check(timeout=60)

    assert states == {"train": "failed"}
    out = capfd.readouterr().out
    assert "the API server could not be reached again for" in out and "(reconnect_budget 3s)" in out
    # The task's last try (no retries): the job is deleted whole once the server is back.
    control_plane.assert_clean(namespace, user)


def remove_rolebindings(control_plane: ControlPlane, namespace: str) -> None:
    """Take every right of the task in ``namespace`` away: its RoleBindings deleted (the Roles stay)."""
    path = f"/apis/rbac.authorization.k8s.io/v1/namespaces/{namespace}/rolebindings"
    for binding in control_plane.request("GET", path)["items"]:
        control_plane.request("DELETE", f"{path}/{binding['metadata']['name']}")


def task_error(output: str) -> str:
    """The exception the task failed with (the last raised in its traceback), as ``Class: message``."""
    traceback = output.rsplit("Task failed with exception", 1)[1]
    return [line for line in traceback.splitlines() if line.startswith("airflow_distributed.exceptions.")][-1]


def refused_as_a_permission_problem(error: str, *verbs_and_resources: str) -> None:
    """The task failed with the provider's refused-request error for a request of its wait (not for a later request
    the lost rights refused too, such as its clean-up's), naming the verb and resource in the server's own words
    (one of ``verbs_and_resources``: which of the wait's requests comes first is the server's timing), saying it is
    a permission problem that is not retried, and not saying that what its clean-up could not delete was
    deleted."""
    assert error.startswith("airflow_distributed.exceptions.ClusterRefusedError: "), error
    assert any(f"cannot {verb_and_resource}" in error for verb_and_resource in verbs_and_resources), error
    assert "refused the credentials or their permissions; not retried" in error, error
    assert "was deleted" not in error and "were deleted" not in error, error


def one_watch_refused(control_plane: ControlPlane, user: str) -> None:
    """Not retried: the wait's refused reads (a watch of each resource it watches, the job's and on a custom kind
    its pods too, or a LIST) are each refused once. The task's clean-up comes after its wait ended: once its refused
    delete is in the audit log, a retried read would be there too."""
    wait_until(lambda: any(line.startswith("delete ") for line in control_plane.refused(user)), timeout=30,
               interval=0.2)
    reads = [read_of(line) for line in control_plane.refused(user) if line.startswith(("watch ", "list "))]
    assert reads and len(reads) == len(set(reads)), control_plane.refused(user)


def read_of(line: str) -> tuple[str, str, tuple[tuple[str, str], ...]]:
    """What a refused read asked for: its verb, path and selectors (a retry differs only in its resourceVersion and
    timeout)."""
    verb, uri = line.split()[:2]
    parts = urllib.parse.urlsplit(uri)
    selectors = [(key, value) for key, value in urllib.parse.parse_qsl(parts.query) if key.endswith("Selector")]
    return verb, parts.path, tuple(sorted(selectors))


@pytest.mark.parametrize("dag_namespace", ["quiet_forbidden", "quiet_forbidden_deferrable"], indirect=True)
def test_a_rolebinding_removed_mid_wait_ends_the_wait_at_once_as_a_permission_problem(
        control_plane: ControlPlane, node: KubeletNode, dag_namespace: tuple[str, str], capfd):
    namespace, user = dag_namespace

    def script(k: Kubelet) -> None:
        k.run_all()
        wait_until(lambda: requests_of(control_plane, user, "watch") >= 1, timeout=60, interval=0.05)
        # The task loses its rights while its watch is open: the real server answers its next watch 403
        # (QUIET_TIMINGS: a watch ends every second). Every other request of the task is refused too from now on.
        remove_rolebindings(control_plane, namespace)

    kubelet = Kubelet(node, namespace).play(script)
    _, states = run_dag_at(namespace.replace("-", "_"))
    kubelet.check(timeout=60)

    assert states == {"train": "failed"}
    out = capfd.readouterr().out
    refused_as_a_permission_problem(task_error(out),
                                    f'watch resource "pods" in API group "" in the namespace "{namespace}"')
    # The clean-up is refused too, and says so: the job is left for someone with the rights to delete it.
    assert f"could not clean up job {namespace}/" in out
    one_watch_refused(control_plane, user)


@pytest.mark.parametrize("dag_namespace", ["kubeflow_forbidden", "kubeflow_forbidden_deferrable"], indirect=True)
def test_a_pytorchjob_whose_rolebindings_are_removed_mid_wait_fails_at_once_saying_it_was_not_deleted(
        control_plane: ControlPlane, node: KubeletNode, dag_namespace: tuple[str, str], capfd):
    namespace, user = dag_namespace
    controller = RealKubeflowController(control_plane, node, namespace, "pytorchjobs")

    def script(c: RealKubeflowController) -> None:
        c.start()  # the pods running and the task (or its trigger) watching the PyTorchJob
        remove_rolebindings(control_plane, namespace)

    controller.play(script)
    _, states = run_dag_at(namespace.replace("-", "_"))
    controller.check()

    assert states == {"train": "failed"}
    out = capfd.readouterr().out
    # The job's watch, or the LIST of its pods made while one of them was still pending.
    refused_as_a_permission_problem(
        task_error(out), f'watch resource "pytorchjobs" in API group "kubeflow.org" in the namespace "{namespace}"',
        f'list resource "pods" in API group "" in the namespace "{namespace}"')
    assert f"could not delete PyTorchJob {namespace}/" in out
    assert controller.jobs() != []  # left for someone with the rights to delete it
    one_watch_refused(control_plane, user)

"""Elastic PyTorch jobs of the kubernetes backend run by Airflow against the real control plane, sync and in the
triggerer, the task talking as the service account bound to exactly the Role of docs/rbac.yaml: the task is the
controller, so a worker pod that is lost (its agent killed, exit 137) is deleted and created again under its name
(so the same address behind the headless Service) and bound by the real scheduler, within ``max_restarts``;
without restarts left the task fails naming it; with ``min_workers`` met the job carries on without it. The DAGs
are the emulator's (``tests/dags/kubernetes_elastic_dags.py``)."""

from __future__ import annotations

import pytest

from tests.helpers import output_so_far, run_dag_at, wait_until, xcom
from tests.kube_control_plane.control_plane import ControlPlane
from tests.kube_control_plane.kubelet import KubeletNode
from tests.kubernetes_helpers import DOCUMENT, Kubelet

pytestmark = [pytest.mark.usefixtures("airflow_db")]


def pod_requests(plane: ControlPlane, user: str, verb: str, name: str | None = None) -> int:
    """How many requests of ``user`` on pods (not their subresources), of one pod if named, reached the server."""
    return len({e["auditID"] for e in plane.audit_events(user) if e["verb"] == verb
                and (ref := e.get("objectRef") or {}).get("resource") == "pods" and not ref.get("subresource")
                and (name is None or ref.get("name") == name)})


def run_until_watched(plane: ControlPlane, user: str, kubelet: Kubelet) -> None:
    """Run the job's pods until the task (or the trigger) watches them: mid-run from then on."""
    kubelet.run_all()
    wait_until(lambda: pod_requests(plane, user, "watch") > 0, timeout=60)


def lose_a_worker_once_watched(plane: ControlPlane, user: str, kubelet: Kubelet) -> None:
    """Kill worker-0's agent (exit 137) once the job runs and is watched."""
    run_until_watched(plane, user, kubelet)
    kubelet.fail(kubelet.pod("worker-0"), 137)


@pytest.mark.parametrize("dag_namespace", ["k8s_elastic", "k8s_elastic_deferrable"], indirect=True)
def test_a_killed_worker_pod_is_created_again_and_bound_and_the_job_succeeds_with_the_restart_counted(
        control_plane: ControlPlane, node: KubeletNode, dag_namespace: tuple[str, str], capfd):
    namespace, user = dag_namespace
    dag_id = namespace.replace("-", "_")
    recreated: dict[str, dict] = {}

    def script(kubelet: Kubelet) -> None:
        run_until_watched(control_plane, user, kubelet)
        kubelet.log(kubelet.master, "master line 1", "master line 2")
        if dag_id == "k8s_elastic":
            # The synchronous wait follows the master's log (pods/log through the API server) before the loss.
            wait_until(lambda: "] master line 2" in output_so_far(), timeout=30)
        worker = kubelet.pod("worker-0")
        first_uid = kubelet.seen[worker]["metadata"]["uid"]
        kubelet.log(worker, "step 40", "Killed")
        kubelet.fail(worker, 137)
        try:
            # Deleted (grace 0; the test kubelet ends the deletion) and created again under its name: a new uid.
            pod = wait_until(lambda: (p := node.get("pods", namespace, worker)) is not None
                             and p["metadata"]["uid"] != first_uid and p, timeout=30)
            recreated.update(node.run_pod(namespace, worker))  # once the real scheduler has bound it here
            kubelet.log(kubelet.master, "master line 3", "resuming from the checkpoint of step 40")
            assert pod["metadata"]["uid"] == recreated["metadata"]["uid"]
        finally:  # the job ends whatever was seen, so that a task that went wrong fails the asserts, not hangs
            kubelet.master_exits(0, document=DOCUMENT)

    kubelet = Kubelet(node, namespace).play(script)
    run, states = run_dag_at(dag_id)
    kubelet.check(30)

    assert states == {"train": "success"}
    job = xcom(run, "train", "job_name")
    worker = f"{job}-worker-0"
    # The same name, subdomain, hostname and command: the same <pod>.<job> address; a new pod counting its restart.
    assert recreated["metadata"]["name"] == worker and recreated["spec"]["subdomain"] == job
    assert recreated["metadata"]["annotations"]["airflow-distributed/restarts"] == "1"
    assert recreated["spec"]["nodeName"] == node.name
    first = kubelet.seen[worker]["spec"]
    assert (recreated["spec"]["hostname"], recreated["spec"]["containers"][0]["command"]) == (
        first["hostname"], first["containers"][0]["command"])
    # The server's own record: three pods created, then the lost one deleted once and created once more.
    assert pod_requests(control_plane, user, "create") == 4
    assert pod_requests(control_plane, user, "delete", worker) == 1
    record = xcom(run, "train", "job")
    assert {r["name"]: r["restarts"] for r in record["replicas"]} == {
        f"{job}-master-0": 0, worker: 1, f"{job}-worker-1": 0}
    assert record["restarts"] == 1
    assert {name: row["runs"] for name, row in record["usage"]["replicas"].items()} == {
        f"{job}-master-0": 1, worker: 2, f"{job}-worker-1": 1}
    out = capfd.readouterr().out
    assert f"replica {worker} was killed (exit code 137): restarting it (1 of max_restarts=1)" in out
    for line in ("master line 1", "master line 2", "master line 3"):  # not shown again after the re-creation
        assert out.count(f"] {line}") == 1, (line, out.count(f"] {line}"))
    if dag_id == "k8s_elastic_deferrable":
        assert out.count("waiting in the triggerer") == 2
    control_plane.assert_clean(namespace, user)


@pytest.mark.parametrize("dag_namespace", ["k8s_elastic_no_restarts"], indirect=True)
def test_without_restarts_left_the_lost_worker_fails_the_task_naming_it(
        control_plane: ControlPlane, node: KubeletNode, dag_namespace: tuple[str, str], capfd):
    namespace, user = dag_namespace
    kubelet = Kubelet(node, namespace).play(lambda k: lose_a_worker_once_watched(control_plane, user, k))
    run, states = run_dag_at("k8s_elastic_no_restarts")
    kubelet.check()

    assert states == {"train": "failed"}
    worker = kubelet.pod("worker-0")
    out = capfd.readouterr().out
    assert ("failed after" in out and f"replica {worker} was killed (exit code 137) after 0 restarts of "
            f"max_restarts=0: 2 replicas left, below min_workers=3") in out
    assert xcom(run, "train", "job")["restarts"] == 0
    assert pod_requests(control_plane, user, "create") == 3  # none created again
    # Its last try (no retries): the job is deleted whole, nothing is kept for a try that never comes.
    assert "; the job was deleted" in out
    control_plane.assert_clean(namespace, user)


@pytest.mark.parametrize("dag_namespace", ["k8s_elastic_carry_on", "k8s_elastic_carry_on_deferrable"],
                         indirect=True)
def test_a_worker_left_out_shows_in_the_final_replicas_in_both_modes(
        control_plane: ControlPlane, node: KubeletNode, dag_namespace: tuple[str, str]):
    # A deferral must not forget the replica the job carried on without: the final table and XCom name it.
    namespace, user = dag_namespace

    def script(kubelet: Kubelet) -> None:
        lose_a_worker_once_watched(control_plane, user, kubelet)
        # The task carries on without it: it watches again (sync), or the trigger fired and the task deferred again.
        wait_until(lambda: pod_requests(control_plane, user, "watch") >= 2, timeout=30)
        kubelet.master_exits(0, document=DOCUMENT)

    kubelet = Kubelet(node, namespace).play(script)
    run, states = run_dag_at(namespace.replace("-", "_"))
    kubelet.check(30)

    assert states == {"train": "success"}
    job = xcom(run, "train", "job_name")
    replicas = {row["name"]: row for row in xcom(run, "train", "replicas")}
    assert sorted(replicas) == [f"{job}-master-0", f"{job}-worker-0", f"{job}-worker-1"]
    assert (replicas[f"{job}-worker-0"]["state"], replicas[f"{job}-worker-0"]["exit_code"]) == ("failed", 137)
    assert replicas[f"{job}-master-0"]["state"] == "succeeded"
    assert f"{job}-worker-0" in {row["name"] for row in xcom(run, "train", "job")["replicas"]}
    assert pod_requests(control_plane, user, "create") == 3  # left out, not created again
    control_plane.assert_clean(namespace, user)

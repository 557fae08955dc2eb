"""Elastic PyTorch on the Kubernetes backend (API emulator, the test playing the kubelet): the task is the
controller, so a worker pod that is lost (its agent killed, exit 137) is recreated under the same name, hence the
same address behind the headless Service, within ``max_restarts``; without restarts left the task fails naming it."""

from __future__ import annotations

import pytest

from tests.dags.kubernetes_dags import namespace_of
from tests.helpers import wait_until, xcom
from tests.integration.test_kubernetes_backend import (
    DOCUMENT,
    NOTHING,
    Kubelet,
    run_dag_at,
    settled,
    task_requests,
)

pytestmark = [pytest.mark.usefixtures("airflow_db", "kubernetes_connection")]


@pytest.mark.parametrize("dag_id", ["k8s_elastic", "k8s_elastic_deferrable"])
def test_a_killed_worker_pod_is_recreated_once_and_the_job_succeeds(emulator, dag_id, capfd):
    namespace = namespace_of(dag_id)
    emulator.create_namespace(namespace)
    recreated: dict[str, dict] = {}

    def script(kubelet: Kubelet) -> None:
        kubelet.run_all()
        wait_until(lambda: any(r.is_watch for r in task_requests(emulator, namespace)), timeout=60)
        worker = kubelet.pod("worker-0")
        first_uid = kubelet.seen[worker]["metadata"]["uid"]
        kubelet.log(worker, "step 40", "Killed")
        kubelet.fail(worker, 137)
        # The task deletes the pod and creates it again under the same name: a new uid, Pending until run.
        pod = wait_until(lambda: (p := emulator.get("pods", namespace, worker)) is not None
                         and p["metadata"]["uid"] != first_uid and p, timeout=30)
        recreated.update(pod)
        emulator.run_pod(namespace, worker)
        kubelet.log(kubelet.master, "resuming from the checkpoint of step 40 (try 1)")
        wait_until(lambda: (emulator.get("pods", namespace, worker) or {}).get("status", {}).get("phase")
                   == "Running", timeout=10)
        kubelet.master_exits(0, document=DOCUMENT)

    kubelet = Kubelet(emulator, namespace).play(script)
    run, states = run_dag_at(dag_id)
    kubelet.check(30)

    assert states == {"train": "success"}
    job = xcom(run, "train", "job_name")
    worker = f"{job}-worker-0"
    # Same name and spec (so the same <pod>.<job> address and subdomain), a new pod that counts its restart.
    assert recreated["metadata"]["name"] == worker and recreated["spec"]["subdomain"] == job
    assert recreated["metadata"]["annotations"]["airflow-distributed/restarts"] == "1"
    assert recreated["spec"]["hostname"] == kubelet.seen[worker]["spec"]["hostname"]
    assert recreated["spec"]["containers"][0]["command"] == kubelet.seen[worker]["spec"]["containers"][0]["command"]
    requests = task_requests(emulator, namespace)
    assert [r.method for r in requests if r.path.endswith("/pods")].count("POST") == 4
    assert [r.method for r in requests if r.path.endswith(f"/pods/{worker}")].count("DELETE") == 1
    record = xcom(run, "train", "job")
    assert {r["name"]: r["restarts"] for r in record["replicas"]} == {
        f"{job}-master-0": 0, worker: 1, f"{job}-worker-1": 0}
    assert record["restarts"] == 1
    out = capfd.readouterr().out
    assert f"replica {worker} was killed (exit code 137): restarting it (1 of max_restarts=1)" in out
    if dag_id == "k8s_elastic_deferrable":
        assert out.count("waiting in the triggerer") == 2
    settled(emulator, namespace, NOTHING)


def test_without_restarts_left_the_lost_worker_fails_the_task_naming_it(emulator, capfd):
    namespace = namespace_of("k8s_elastic_no_restarts")
    emulator.create_namespace(namespace)

    def script(kubelet: Kubelet) -> None:
        kubelet.run_all()
        wait_until(lambda: any(r.is_watch for r in task_requests(emulator, namespace)), timeout=60)
        kubelet.fail(kubelet.pod("worker-0"), 137)

    kubelet = Kubelet(emulator, namespace).play(script)
    run, states = run_dag_at("k8s_elastic_no_restarts")
    kubelet.check()

    assert states == {"train": "failed"}
    worker = kubelet.pod("worker-0")
    out = capfd.readouterr().out
    assert ("failed after" in out and f"replica {worker} was killed (exit code 137) after 0 restarts of "
            f"max_restarts=0: 2 replicas left, below min_workers=3") in out
    record = xcom(run, "train", "job")
    assert record["restarts"] == 0
    assert [r.method for r in task_requests(emulator, namespace) if r.path.endswith("/pods")].count("POST") == 3

"""Fault tolerance on the Kubernetes backend (API emulator, the test playing the kubelet).

Elastic PyTorch: the task is the controller, so a worker pod that is lost (its agent killed, exit 137) is recreated
under the same name, hence the same address behind the headless Service, within ``max_restarts``; without restarts
left the task fails naming it. Retries: the pods of a retried job find the checkpoints the failed try saved."""

from __future__ import annotations

import json
import os
import textwrap

import pytest

from tests.dags.kubernetes_dags import namespace_of
from tests.helpers import output_so_far, run_dag_at, wait_until, xcom
from tests.kubernetes_helpers import (
    DOCUMENT,
    NOTHING,
    Kubelet,
    as_the_pod,
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
        kubelet.log(kubelet.master, "master line 1", "master line 2")
        if not dag_id.endswith("deferrable"):
            # The synchronous wait follows the master's log: its lines are in the task log before the worker is lost.
            # Read without taking the capture (readouterr from this thread would lose what the task writes meanwhile).
            wait_until(lambda: "] master line 2" in output_so_far(), timeout=30)
        kubelet.log(worker, "step 40", "Killed")
        kubelet.fail(worker, 137)
        # The task deletes the pod and creates it again under the same name: a new uid, Pending until run.
        pod = wait_until(lambda: (p := emulator.get("pods", namespace, worker)) is not None
                         and p["metadata"]["uid"] != first_uid and p, timeout=30)
        recreated.update(pod)
        emulator.run_pod(namespace, worker)
        kubelet.log(kubelet.master, "master line 3", "resuming from the checkpoint of step 40 (try 1)")
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
    # What the lost pod ran counts with what its replacement ran, also across the deferrals.
    assert {name: row["runs"] for name, row in record["usage"]["replicas"].items()} == {
        f"{job}-master-0": 1, worker: 2, f"{job}-worker-1": 1}
    out = capfd.readouterr().out
    assert f"replica {worker} was killed (exit code 137): restarting it (1 of max_restarts=1)" in out
    # Waiting again after the pod was recreated does not show the master's lines again.
    for line in ("master line 1", "master line 2", "master line 3"):
        assert out.count(f"] {line}") == 1, (line, out.count(f"] {line}"))
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


@pytest.mark.parametrize("dag_id", ["k8s_elastic_carry_on", "k8s_elastic_carry_on_deferrable"])
def test_a_worker_left_out_shows_in_the_final_replicas_in_both_modes(emulator, dag_id):
    # A deferral must not forget the replica the job carried on without: the final table and XCom name it.
    namespace = namespace_of(dag_id)
    emulator.create_namespace(namespace)

    def script(kubelet: Kubelet) -> None:
        kubelet.run_all()
        wait_until(lambda: any(r.is_watch for r in task_requests(emulator, namespace)), timeout=60)
        kubelet.fail(kubelet.pod("worker-0"), 137)
        # The task carries on without it: it watches again (sync), or the trigger fired and the task deferred again.
        wait_until(lambda: sum(r.is_watch for r in task_requests(emulator, namespace)) >= 2, timeout=30)
        kubelet.master_exits(0, document=DOCUMENT)

    kubelet = Kubelet(emulator, namespace).play(script)
    run, states = run_dag_at(dag_id)
    kubelet.check(30)

    assert states == {"train": "success"}
    job = xcom(run, "train", "job_name")
    replicas = {row["name"]: row for row in xcom(run, "train", "replicas")}
    assert sorted(replicas) == [f"{job}-master-0", f"{job}-worker-0", f"{job}-worker-1"]
    assert replicas[f"{job}-worker-0"]["state"] == "failed"
    assert replicas[f"{job}-worker-0"]["exit_code"] == 137
    assert replicas[f"{job}-master-0"]["state"] == "succeeded"
    record = xcom(run, "train", "job")
    assert f"{job}-worker-0" in {row["name"] for row in record["replicas"]}


def test_a_retried_job_resumes_from_the_checkpoint_of_the_failed_try(emulator, airflow_home, capfd):
    namespace = namespace_of("k8s_checkpoint_retry")
    emulator.create_namespace(namespace)
    seen: dict[str, str] = {}

    def pods_of_try(kubelet: Kubelet, exclude: set[str]) -> dict[str, dict]:
        def fresh():
            pods = [p for p in emulator.list("pods", namespace, label_selector="airflow-distributed/job")
                    if p["metadata"]["uid"] not in exclude]
            return pods if len(pods) == 3 else None
        found = wait_until(fresh, timeout=60, interval=0.05)
        return {f"{p['metadata']['labels']['airflow-distributed/role']}-"
                f"{p['metadata']['labels']['airflow-distributed/index']}": p for p in found}

    def script(kubelet: Kubelet) -> None:
        first = pods_of_try(kubelet, set())
        for pod in first.values():
            emulator.run_pod(namespace, pod["metadata"]["name"])
        # Try 1: the master saves checkpoints at steps 10..40 (keep 3), then a worker crashes at step 45.
        seen["try 1"] = as_the_pod(first["master-0"], textwrap.dedent("""
            from airflow_distributed import tracking
            for step in (10, 20, 30, 40):
                tracking.save_checkpoint({"w": step}, step)
            print(tracking.get_try_number())
        """))
        emulator.fail_pod(namespace, first["worker-0"]["metadata"]["name"], exit_code=3)
        # Try 2: new pods of the same job; the master finds try 1's newest checkpoint and trains from there.
        second = pods_of_try(kubelet, {p["metadata"]["uid"] for p in first.values()})
        for pod in second.values():
            emulator.run_pod(namespace, pod["metadata"]["name"])
        seen["try 2"] = as_the_pod(second["master-0"], textwrap.dedent("""
            from airflow_distributed import tracking
            step, state = tracking.latest_checkpoint()
            print(tracking.get_try_number(), step, state["w"])
        """))
        try_number, step, _ = seen["try 2"].split()
        wait_until(lambda: any(r.is_watch for r in task_requests(emulator, namespace)), timeout=30)
        kubelet.emu.set_pod_phase(namespace, second["master-0"]["metadata"]["name"], "Running", container_states={
            "base": {"terminated": {"exitCode": 0, "reason": "Completed", "message": json.dumps(
                {"metrics": {"resumed_from_step": int(step), "try": int(try_number)}})}}})

    kubelet = Kubelet(emulator, namespace).play(script)
    run, states = run_dag_at("k8s_checkpoint_retry")
    kubelet.check(30)

    assert states == {"train": "success"}
    assert seen == {"try 1": "1", "try 2": "2 40 40"}
    assert xcom(run, "train", "metrics") == {"resumed_from_step": 40, "try": 2}
    out = capfd.readouterr().out
    assert "exited with code 3" in out  # try 1's failure, then the retry
    # The same directory for both tries, outside the pods (here: the test's AIRFLOW_HOME), holding try 1's files.
    folder = os.path.join(airflow_home, "k8s-checkpoints")
    checkpoints = sorted(name for name in os.listdir(folder) if not name.startswith(".airflow-distributed-"))
    assert checkpoints == [f"checkpoint-{step:012d}.pkl" for step in (20, 30, 40)]
    # Beside them, the list of what the job saved, which its clean-up after success goes by.
    assert [name for name in os.listdir(folder) if name.endswith(".checkpoints")] != []
    settled(emulator, namespace, NOTHING)

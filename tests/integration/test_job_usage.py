"""What a job cost, through real DAG runs: the ``usage`` of the ``job`` record on the local backend (real processes,
a failed try and a retry) and on Kubernetes (the API emulator, sync and deferred), checked against the processes'
running time and the pods' own timestamps and requests."""

from __future__ import annotations

import json
import time
from datetime import datetime, timedelta

import pytest

from tests.dags.usage_dags import namespace_of
from tests.helpers import run_dag, run_dag_at, wait_until, xcom
from tests.kubernetes_helpers import DOCUMENT, Kubelet, task_requests

pytestmark = pytest.mark.usefixtures("airflow_db")

GIB = 2**30
QUANTITY = {"m": 1e-3, "Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "": 1}


def _amount(text: str) -> float:
    for suffix in ("Ki", "Mi", "Gi", "m", ""):
        if text.endswith(suffix) and text[: len(text) - len(suffix)].replace(".", "").isdigit():
            return float(text[: len(text) - len(suffix)]) * QUANTITY[suffix]
    raise AssertionError(f"unexpected quantity {text}")


def _stamp(seconds: float) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(seconds))


def _epoch(stamp: str) -> float:
    return datetime.fromisoformat(stamp.replace("Z", "+00:00")).timestamp()


def end_pod_later(emulator, namespace: str, name: str, seconds: float, document: dict | None = None) -> dict:
    """Every container of pod ``name`` ends ``seconds`` after the pod started (a time no test waits out)."""
    pod = emulator.get("pods", namespace, name)
    start = pod["status"]["startTime"]
    end = _stamp(_epoch(start) + seconds)
    states = {c["name"]: {"terminated": {"exitCode": 0, "reason": "Completed", "startedAt": start, "finishedAt": end,
                                         **({"message": json.dumps(document)} if document else {})}}
              for c in pod["spec"]["containers"]}
    return emulator.set_pod_phase(namespace, name, "Succeeded", container_states=states)


def check_against_pods(usage: dict, pods: dict[str, dict]) -> None:
    """Each replica's figures are its pod's container requests times its pod's running time, read from the pod."""
    assert set(usage["replicas"]) == set(pods) and usage["tries"] == 1
    for name, pod in pods.items():
        seconds = max(_epoch(c["state"]["terminated"]["finishedAt"]) for c in pod["status"]["containerStatuses"]
                      ) - _epoch(pod["status"]["startTime"])
        requests = [c.get("resources", {}).get("requests", {}) for c in pod["spec"]["containers"]]
        limits = [c.get("resources", {}).get("limits", {}) for c in pod["spec"]["containers"]]
        cpu = sum(_amount(r.get("cpu", "0")) for r in requests)
        memory = sum(_amount(r.get("memory", "0")) for r in requests) / GIB
        gpu = sum(_amount(lim.get("nvidia.com/gpu", "0")) for lim in limits)
        row = usage["replicas"][name]
        assert row["running_seconds"] == seconds and seconds > 3600
        assert (row["cpu_seconds"], row["memory_gib_seconds"], row["gpu_seconds"]) == pytest.approx(
            (cpu * seconds, memory * seconds, gpu * seconds), abs=0.002)
    assert usage["cpu_seconds"] == pytest.approx(sum(r["cpu_seconds"] for r in usage["replicas"].values()))
    assert usage["running_seconds"] == pytest.approx(sum(r["running_seconds"] for r in usage["replicas"].values()))
    json.dumps(usage, allow_nan=False)


def test_a_local_job_counts_its_replicas_requests_times_their_running_time_over_both_tries():
    run, states = run_dag("local_usage")

    assert states == {"train": "success"}
    usage = xcom(run, "train", "job")["usage"]
    assert usage["tries"] == 2
    master, worker = (usage["replicas"][name] for name in sorted(usage["replicas"], key=lambda n: "worker" in n))
    assert (master["cpu"], master["memory_gib"], master["gpu"]) == (1.5, 2.0, 0.0)
    assert (worker["cpu"], worker["memory_gib"]) == (1.0, 1.0)
    assert master["runs"] == 2 and worker["runs"] == 2  # one per try
    for row in (master, worker):
        assert 0.6 <= row["running_seconds"] <= usage["wall_seconds"]  # each run slept 0.3 s
        # Each try's figures are rounded to the millisecond before the next try's are added: over two tries a
        # product and its factor drift apart by up to 2 x 0.5 ms x (1 + the request).
        assert row["cpu_seconds"] == pytest.approx(row["cpu"] * row["running_seconds"], abs=0.005)
        assert row["memory_gib_seconds"] == pytest.approx(row["memory_gib"] * row["running_seconds"], abs=0.005)
    assert usage["cpu_seconds"] == pytest.approx(master["cpu_seconds"] + worker["cpu_seconds"], abs=0.002)
    json.dumps(usage, allow_nan=False)


@pytest.mark.usefixtures("kubernetes_connection")
@pytest.mark.parametrize("dag_id", ["k8s_usage", "k8s_usage_deferrable"])
def test_a_kubernetes_job_costs_its_pods_requests_from_their_start_to_their_end(emulator, dag_id):
    namespace = namespace_of(dag_id)
    emulator.create_namespace(namespace)
    seen: dict[str, dict] = {}

    def script(kubelet: Kubelet) -> None:
        wait_until(lambda: any(r.is_watch for r in task_requests(emulator, namespace)), timeout=60)
        kubelet.run_all()
        # Each pod ends an hour and some minutes after it started, the master last: times no test waits out.
        for minutes, key in enumerate(sorted(kubelet.names(), key=lambda k: k.startswith("master")), start=1):
            name = kubelet.pod(key)
            seen[name] = end_pod_later(emulator, namespace, name, 3600 + 60 * minutes,
                                       DOCUMENT if key.startswith("master") else None)

    kubelet = Kubelet(emulator, namespace, pods=2).play(script)
    run, states = run_dag_at(dag_id)
    kubelet.check()

    assert set(states.values()) == {"success"}
    usage = xcom(run, "train", "job")["usage"]
    check_against_pods(usage, seen)
    master = next(name for name in seen if "master" in name)
    assert usage["replicas"][master]["gpu"] == 2 and usage["gpu_seconds"] == 2 * usage["replicas"][master][
        "running_seconds"]
    assert timedelta(seconds=usage["wall_seconds"]) < timedelta(minutes=10)  # the task's own time, not the pods'

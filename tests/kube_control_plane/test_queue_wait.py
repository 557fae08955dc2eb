"""Waiting for capacity on the real control plane: a replica the real scheduler leaves Unschedulable is queued,
not starting. The task log says why the job waits (the scheduler's message) and since when; ``queue_timeout``,
not ``startup_timeout``, bounds the wait (sync and in the triggerer), and past it the task fails naming the
scheduler's reason."""

from __future__ import annotations

import time

import pytest

from tests.helpers import run_dag_at, wait_until
from tests.kube_control_plane.control_plane import NOTHING, ControlPlane
from tests.kube_control_plane.kubelet import CAPACITY, KubeletNode
from tests.kubernetes_helpers import DOCUMENT, Kubelet, comes_to

pytestmark = [pytest.mark.usefixtures("airflow_db")]

#: Three times the DAGs' startup_timeout (3 s): a 90-second wait for GPUs, compressed.
QUEUED_SECONDS = 9.0


def _unschedulable(node: KubeletNode, namespace: str, pod: str) -> bool:
    found = node.get("pods", namespace, pod) or {}
    return any(c["type"] == "PodScheduled" and c["status"] == "False" and c.get("reason") == "Unschedulable"
               for c in (found.get("status") or {}).get("conditions") or [])


@pytest.mark.parametrize("dag_namespace", ["k8s_queued_then_scheduled", "k8s_queued_then_scheduled_deferrable"],
                         indirect=True)
def test_a_job_waiting_for_gpus_longer_than_startup_timeout_then_scheduled_succeeds(
        control_plane: ControlPlane, node: KubeletNode, dag_namespace: tuple[str, str], capfd):
    namespace, user = dag_namespace
    big = KubeletNode(control_plane, name=f"gpu-{namespace}"[:60], capacity={**CAPACITY, "nvidia.com/gpu": "16"},
                      labels={"pool": "training"})

    def script(k: Kubelet) -> None:
        hungry = k.pod("worker-1")
        k.run_all(except_=("worker-1",))
        wait_until(lambda: _unschedulable(node, namespace, hungry), timeout=30, interval=0.1)
        time.sleep(QUEUED_SECONDS)
        big.start()  # capacity arrives: the real scheduler binds the replica there
        big.bound(namespace, hungry, timeout=60)
        big.run_pod(namespace, hungry)
        k.log(k.master, "step 1 loss 0.500")
        k.master_exits(0, document=DOCUMENT)

    try:
        kubelet = Kubelet(node, namespace).play(script)
        run, states = run_dag_at(namespace.replace("-", "_"))
        kubelet.check(timeout=60)
        out = capfd.readouterr().out
        assert states == {"train": "success"}, out[-3000:]
        assert "1 of 3 replicas wait to be scheduled since 20" in out
        assert "-worker-1: Unschedulable: 0/2 nodes are available" in out or \
            "-worker-1: Unschedulable: 0/1 nodes are available" in out
        comes_to(lambda: control_plane.left(namespace), NOTHING, timeout=60)
    finally:
        big.stop()
        control_plane.request("DELETE", f"/api/v1/nodes/{big.name}")
    assert control_plane.refused(user) == []


@pytest.mark.parametrize("dag_namespace", ["k8s_queue_timeout"], indirect=True)
def test_a_job_waiting_past_queue_timeout_fails_naming_the_real_schedulers_reason(
        control_plane: ControlPlane, node: KubeletNode, dag_namespace: tuple[str, str], capfd):
    namespace, user = dag_namespace
    kubelet = Kubelet(node, namespace).play(lambda k: k.run_all(except_=("worker-1",)))
    run, states = run_dag_at(namespace.replace("-", "_"))
    kubelet.check()

    assert states == {"train": "failed"}
    out = capfd.readouterr().out
    failure = out[out.rindex("ReplicaNotScheduledError: job "):].splitlines()[0]
    assert "-worker-1 was not scheduled within 4s (queue_timeout): Unschedulable: 0/" in failure, failure
    assert "Insufficient nvidia.com/gpu" in failure, failure
    # The task's last try (no retries): the job is deleted whole, no pod is left waiting or running.
    comes_to(lambda: control_plane.left(namespace), NOTHING, timeout=60)
    assert control_plane.refused(user) == []

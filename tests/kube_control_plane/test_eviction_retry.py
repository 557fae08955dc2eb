"""A replica taken away mid-training on the real control plane, run by Airflow with ``retries=2`` and a
``retry_delay`` of 30 minutes under the provider's retry policy, sync and in the triggerer: the worker's pod is
evicted through the real API server's eviction subresource (what ``kubectl drain`` does) or deleted
(``kubectl delete pod``). On this 1.20 server both are a graceful deletion and nothing more (no ``DisruptionTarget``
condition; the test adds none): the pod gets a ``deletionTimestamp``, its container the SIGTERM, and the test
kubelet reports its exit 143 before finishing the deletion, as a real kubelet does. The try fails with
``ReplicaLostError`` saying the worker was deleted or evicted, the policy retries at once, and the retry's master,
a real process with its pod's variables as the server stored them, resumes from the checkpoint the first try saved.
"""

from __future__ import annotations

import json
import os
import threading
import time

import pytest
from kubernetes import client

from tests.helpers import run_dag_at, wait_until, xcom
from tests.integration.test_failure_classes import tries
from tests.kube_control_plane.control_plane import ControlPlane
from tests.kube_control_plane.kubelet import KubeletNode
from tests.kubernetes_helpers import JOB_LABEL, Player, as_the_pod

pytestmark = [pytest.mark.usefixtures("airflow_db")]

#: What a container exits with on the SIGTERM of its pod's graceful deletion (128 + 15).
SIGTERM_EXIT = 143
SAVE = """
from airflow_distributed import tracking
for step in (10, 20, 30):
    tracking.save_checkpoint({"w": step}, step)
print(tracking.get_try_number())
"""
RESUME = """
from airflow_distributed import tracking
step, state = tracking.latest_checkpoint()
print(tracking.get_try_number(), step, state["w"])
"""


class Tries(Player):
    """Plays the test kubelet's part for each try's pods (new uids) until ``stop()``."""

    thread_name = "tries"

    def __init__(self, node: KubeletNode, plane: ControlPlane, namespace: str, user: str, how: str) -> None:
        """:param how: ``evicted`` (the Eviction API) or ``deleted`` (``delete_namespaced_pod``), as the admin."""
        super().__init__()
        self.node, self.plane, self.namespace, self.user, self.how = node, plane, namespace, user, how
        self.stopping = threading.Event()
        self.seen: dict[str, str] = {}

    def fresh_pods(self, old: set[str]) -> dict[str, dict] | None:
        pods = [p for p in self.node.list("pods", self.namespace, label_selector=JOB_LABEL)
                if p["metadata"]["uid"] not in old and not p["metadata"].get("deletionTimestamp")]
        if len(pods) < 2:
            return None
        return {f"{p['metadata']['labels']['airflow-distributed/role']}-"
                f"{p['metadata']['labels']['airflow-distributed/index']}": p for p in pods}

    def watched(self) -> int:
        return sum(e["verb"] == "watch" for e in self.plane.audit_events(self.user))

    def run(self) -> None:
        old: set[str] = set()
        attempt = 0
        while not self.stopping.is_set():
            pods = self.fresh_pods(old)
            if pods is None:
                time.sleep(0.05)
                continue
            attempt += 1
            old |= {p["metadata"]["uid"] for p in pods.values()}
            master, worker = (pods[key]["metadata"]["name"] for key in ("master-0", "worker-0"))
            for name in (master, worker):
                self.node.run_pod(self.namespace, name)
            if attempt == 1:
                self.seen["try 1"] = as_the_pod(pods["master-0"], SAVE)
                self.node.append_log(self.namespace, master, "step 30 loss 0.125", container="base")
                # Taken away once the job is watched (in the task or in the triggerer), mid-training; its container
                # ends on the SIGTERM.
                wait_until(lambda: self.watched() > 0, timeout=60)
                self.node.exit_on_sigterm[(self.namespace, worker)] = SIGTERM_EXIT
                if self.how == "evicted":
                    self.plane.request("POST", f"/api/v1/namespaces/{self.namespace}/pods/{worker}/eviction", {
                        "apiVersion": "policy/v1beta1", "kind": "Eviction",
                        "metadata": {"name": worker, "namespace": self.namespace}})
                else:
                    client.CoreV1Api(self.plane.admin).delete_namespaced_pod(worker, self.namespace)
                continue
            self.seen[f"try {attempt}"] = resumed = as_the_pod(pods["master-0"], RESUME)
            try_number, step, _ = resumed.split()
            document = {"metrics": {"resumed_from_step": int(step), "try": int(try_number)}}
            self.node.set_pod_phase(self.namespace, master, "Running", container_states={"base": {"terminated": {
                "exitCode": 0, "reason": "Completed", "message": json.dumps(document)}}})

    def stop(self) -> None:
        self.stopping.set()
        self.check(30)


@pytest.mark.parametrize("dag_namespace", ["k8s_evicted_resumes", "k8s_evicted_resumes_deferrable",
                                           "k8s_deleted_resumes", "k8s_deleted_resumes_deferrable"], indirect=True)
def test_a_replica_evicted_or_deleted_mid_training_is_lost_retried_at_once_and_resumes_from_the_checkpoint(
        control_plane: ControlPlane, node: KubeletNode, dag_namespace: tuple[str, str], airflow_home, capfd):
    namespace, user = dag_namespace
    dag_id = namespace.replace("-", "_")
    how = "evicted" if dag_id.startswith("k8s_evicted") else "deleted"
    folder = os.path.join(airflow_home, "checkpoints", dag_id)
    player = Tries(node, control_plane, namespace, user, how).play(Tries.run)
    try:
        run, states = run_dag_at(dag_id)
    finally:
        player.stop()

    assert states == {"train": "success"}
    last, earlier = tries(run)
    assert last == 2
    ((state, delay, reason),) = earlier
    assert delay == 0.0  # at once, not after retry_delay's 30 minutes
    assert reason is not None and reason.startswith("ReplicaLostError: the cluster took a replica away")
    assert reason.endswith(": DeletionStarted)")
    out = capfd.readouterr().out
    # Try 1's message: what took the worker (a 1.20 server tells an eviction from a deletion by nothing), then how
    # its container went.
    assert f"-worker-0 was deleted or evicted and exited with code {SIGTERM_EXIT}" in out
    assert "ReplicaLostError" in out and "ReplicaExitedError" not in out
    # Try 2's master found try 1's newest checkpoint, in the folder both tries' pods were given.
    assert player.seen == {"try 1": "1", "try 2": "2 30 30"}
    assert xcom(run, "train", "metrics") == {"resumed_from_step": 30, "try": 2}
    assert sorted(name for name in os.listdir(folder) if name.startswith("checkpoint-")) == [
        f"checkpoint-{step:012d}.pkl" for step in (10, 20, 30)]
    control_plane.assert_clean(namespace, user)

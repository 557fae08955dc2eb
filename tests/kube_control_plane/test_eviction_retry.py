"""A replica taken away mid-training on the real control plane, run by Airflow with ``retries=2`` and a
``retry_delay`` of 30 minutes under the provider's retry policy, sync and in the triggerer: the worker's pod is
evicted through the real API server's eviction subresource (what ``kubectl drain`` does) or deleted
(``kubectl delete pod``). On this 1.20 server both are a graceful deletion and nothing more (no ``DisruptionTarget``
condition; the test adds none): the pod gets a ``deletionTimestamp``, its container the SIGTERM, and the test
kubelet reports its exit 143 before finishing the deletion, as a real kubelet does. The try fails with
``ReplicaLostError`` saying the worker was deleted or evicted, the policy retries at once, and the retry's master,
a real process with its pod's variables as the server stored them, resumes from the checkpoint the first try saved.

The same on ``backend="kubeflow"`` (a PyTorchJob) and ``backend="trainjob"``, their controllers played by the
stand-ins of ``custom_jobs.py``: as a real controller does, the stand-in marks the job failed once the worker's
container has exited, by which time its pod is gone; the verdict is the replica lost all the same, from what the
task's (or the trigger's) watch of the job's pods saw of it as it went.
"""

from __future__ import annotations

import contextlib
import functools
import json
import os
import threading
import time

import pytest
from kubernetes import client

from tests.helpers import run_dag_at, wait_until, xcom
from tests.integration import trainjob_controller as trainjob
from tests.integration.kubeflow_controller import GROUP
from tests.integration.test_failure_classes import tries
from tests.kube_control_plane.control_plane import ControlPlane
from tests.kube_control_plane.custom_jobs import RealKubeflowController, RealTrainerController
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
    """Plays the test kubelet's part for each try's pods (new uids) until ``stop()``, and on the ``kubeflow`` and
    ``trainjob`` backends their controller's (``custom_jobs``): each try's job object is made into pods, failed once
    try 1's worker is gone, succeeded once try 2's master is done. ``pods`` is each try's (master, worker)."""

    thread_name = "tries"

    def __init__(self, node: KubeletNode, plane: ControlPlane, namespace: str, user: str, how: str,
                 backend: str) -> None:
        """:param how: ``evicted`` (the Eviction API) or ``deleted`` (``delete_namespaced_pod``), as the admin.
        :param backend: the DAG's (``k8s``, ``kubeflow``, ``trainjob``): who makes the pods."""
        super().__init__()
        self.node, self.plane, self.namespace, self.user, self.how = node, plane, namespace, user, how
        self.backend = backend
        self.stopping = threading.Event()
        self.seen: dict[str, str] = {}
        self.pods: list[tuple[str, str]] = []
        self.controller: RealKubeflowController | RealTrainerController | None = None

    def fresh_pods(self, old: set[str]) -> tuple[dict, dict] | None:
        """This try's (master, worker) pods once they exist (on a custom kind, made from its fresh job object)."""
        if self.backend != "k8s":
            return self.fresh_job_pods(old)
        pods = [p for p in self.node.list("pods", self.namespace, label_selector=JOB_LABEL)
                if p["metadata"]["uid"] not in old and not p["metadata"].get("deletionTimestamp")]
        if len(pods) < 2:
            return None
        by_key = {f"{p['metadata']['labels']['airflow-distributed/role']}-"
                  f"{p['metadata']['labels']['airflow-distributed/index']}": p for p in pods}
        return by_key["master-0"], by_key["worker-0"]

    def fresh_job_pods(self, old: set[str]) -> tuple[dict, dict] | None:
        controller = (RealKubeflowController(self.plane, self.node, self.namespace, "pytorchjobs")
                      if self.backend == "kubeflow" else RealTrainerController(self.plane, self.node, self.namespace))
        job = next((j for j in controller.jobs() if j["metadata"]["uid"] not in old
                    and not j["metadata"].get("deletionTimestamp")), None)
        if job is None:
            return None
        old.add(job["metadata"]["uid"])
        controller.job, self.controller = job, controller
        controller.create_pods()
        controller.run_all()
        if isinstance(controller, RealKubeflowController):
            controller.conditions(("Created", "PyTorchJobCreated", ""), ("Running", "PyTorchJobRunning", ""))
        else:
            controller.write_status(active=1)
        names = [controller.pods[key] for key in (("master-0", "worker-0") if self.backend == "kubeflow" else (0, 1))]
        found = {p["metadata"]["name"]: p for p in self.node.list("pods", self.namespace)}
        return found[names[0]], found[names[1]]

    def watching(self, resource: str) -> bool:
        """The task (or its trigger) has watched ``resource`` (``pods``, ``pytorchjobs``, ``trainjobs``)."""
        return any(e["verb"] == "watch" and (e.get("objectRef") or {}).get("resource") == resource
                   for e in self.plane.audit_events(self.user))

    def watched(self) -> None:
        """Until the task (or its trigger) waits for the job: it watches what decides it (the pods, or the job
        object), and it is given a few seconds to watch the pods too, without which the test goes on (so that a
        wait that does not watch them fails the test rather than hanging it)."""
        decides = {"k8s": "pods", "kubeflow": "pytorchjobs", "trainjob": trainjob.PLURAL}[self.backend]
        wait_until(functools.partial(self.watching, decides), timeout=60)
        with contextlib.suppress(AssertionError):
            wait_until(functools.partial(self.watching, "pods"), timeout=10)

    def gone(self, name: str) -> bool:
        return all(p["metadata"]["name"] != name for p in self.node.list("pods", self.namespace))

    def run(self) -> None:
        old: set[str] = set()
        attempt = 0
        while not self.stopping.is_set():
            pods = self.fresh_pods(old)
            if pods is None:
                time.sleep(0.05)
                continue
            attempt += 1
            old |= {p["metadata"]["uid"] for p in pods}
            master, worker = (pod["metadata"]["name"] for pod in pods)
            self.pods.append((master, worker))
            for name in (master, worker):
                self.node.run_pod(self.namespace, name)
            if attempt == 1:
                self.seen["try 1"] = as_the_pod(pods[0], SAVE)
                self.node.append_log(self.namespace, master, "step 30 loss 0.125", container=pods[0]["spec"][
                    "containers"][0]["name"])
                # Taken away once the job is watched (in the task or in the triggerer), mid-training; its container
                # ends on the SIGTERM.
                self.watched()
                self.node.exit_on_sigterm[(self.namespace, worker)] = SIGTERM_EXIT
                if self.how == "evicted":
                    self.plane.request("POST", f"/api/v1/namespaces/{self.namespace}/pods/{worker}/eviction", {
                        "apiVersion": "policy/v1beta1", "kind": "Eviction",
                        "metadata": {"name": worker, "namespace": self.namespace}})
                else:
                    client.CoreV1Api(self.plane.admin).delete_namespaced_pod(worker, self.namespace)
                if self.controller is not None:
                    # The controller saw the container's exit; by the time it marks the job failed the pod is gone.
                    wait_until(functools.partial(self.gone, worker), timeout=30)
                    self.job_failed()
                continue
            self.seen[f"try {attempt}"] = resumed = as_the_pod(pods[0], RESUME)
            try_number, step, _ = resumed.split()
            document = {"metrics": {"resumed_from_step": int(step), "try": int(try_number)}}
            self.node.set_pod_phase(self.namespace, master, "Running", container_states={
                pods[0]["spec"]["containers"][0]["name"]: {"terminated": {
                    "exitCode": 0, "reason": "Completed", "message": json.dumps(document)}}})
            self.job_succeeded()

    def job_failed(self) -> None:
        controller = self.controller
        if isinstance(controller, RealKubeflowController):
            controller.conditions(("Created", "PyTorchJobCreated", ""), ("Running", "PyTorchJobRunning", ""), (
                "Failed", "PyTorchJobFailed", f"PyTorchJob {controller.name} is failed because 1 Worker replica(s) "
                "failed."))
        elif isinstance(controller, RealTrainerController):
            controller.condition("Failed", "True", "FailedJobs", "jobset failed due to: 1 failed job(s) in node")

    def job_succeeded(self) -> None:
        controller = self.controller
        if isinstance(controller, RealKubeflowController):
            controller.conditions(("Created", "PyTorchJobCreated", ""), ("Running", "PyTorchJobRunning", ""),
                                  ("Succeeded", "PyTorchJobSucceeded", "done"))
        elif isinstance(controller, RealTrainerController):
            controller.condition("Complete", "True", "AllJobsCompleted", "jobset completed successfully")

    def stop(self) -> None:
        self.stopping.set()
        self.check(30)


# The custom job kinds' deferred cases run with the slow tests: the default run keeps each backend's synchronous
# wait and the pods backend's deferred one (the triggers share one pod watch).
@pytest.mark.parametrize("dag_namespace", [
    pytest.param(f"{backend}_{how}_resumes{suffix}",
                 marks=[pytest.mark.slow] if backend != "k8s" and suffix else [])
    for backend in ("k8s", "kubeflow", "trainjob")
    for how in ("evicted", "deleted") for suffix in ("", "_deferrable")], indirect=True)
def test_a_replica_evicted_or_deleted_mid_training_is_lost_retried_at_once_and_resumes_from_the_checkpoint(
        control_plane: ControlPlane, node: KubeletNode, dag_namespace: tuple[str, str], airflow_home, capfd):
    namespace, user = dag_namespace
    dag_id = namespace.replace("-", "_")
    backend, how = dag_id.split("_")[:2]
    folder = os.path.join(airflow_home, "checkpoints", dag_id)
    player = Tries(node, control_plane, namespace, user, how, backend).play(Tries.run)
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
    # Try 1's message: the worker and what took it (a 1.20 server tells an eviction from a deletion by nothing),
    # then how its container went.
    worker = player.pods[0][1]
    assert f"replica {worker} was deleted or evicted and exited with code {SIGTERM_EXIT}" in out
    assert "ReplicaLostError" in out and "ReplicaExitedError" not in out
    # Try 2's master found try 1's newest checkpoint, in the folder both tries' pods were given.
    assert player.seen == {"try 1": "1", "try 2": "2 30 30"}
    assert xcom(run, "train", "metrics") == {"resumed_from_step": 30, "try": 2}
    assert sorted(name for name in os.listdir(folder) if name.startswith("checkpoint-")) == [
        f"checkpoint-{step:012d}.pkl" for step in (10, 20, 30)]
    control_plane.assert_clean(namespace, user)
    if backend != "k8s":  # the job object too (its last try succeeded)
        group, version, plural = ((GROUP, "v1", "pytorchjobs") if backend == "kubeflow"
                                  else (trainjob.GROUP, trainjob.VERSION, trainjob.PLURAL))
        path = f"/apis/{group}/{version}/namespaces/{namespace}/{plural}"
        wait_until(lambda: control_plane.request("GET", path)["items"] == [], timeout=60)

"""A job's objects after its tries, on the real control plane, run by Airflow with ``retries=1``, sync and in the
triggerer: a script that fails every try. After try 1 its finished pods are kept (its running ones deleted), and try 2
finds them; after try 2, the last, nothing of the job is left: no Service, ConfigMap, Secret or pod waits for a
try that never comes. And the audit log of the job's life shows no request the task could have known was useless:
no DELETE answered 404 for a Secret the job never had, no second LIST of pods just listed.
"""

from __future__ import annotations

import threading
import time

import pytest

from tests.helpers import run_dag_at, wait_until
from tests.integration.test_failure_classes import tries
from tests.kube_control_plane.control_plane import ControlPlane
from tests.kube_control_plane.kubelet import KubeletNode
from tests.kubernetes_helpers import JOB_LABEL, Player

pytestmark = [pytest.mark.usefixtures("airflow_db")]


class FailingTries(Player):
    """Plays each try's pods: both run, then the worker's script exits 2 once the job is watched."""

    thread_name = "failing-tries"

    def __init__(self, node: KubeletNode, plane: ControlPlane, namespace: str, user: str) -> None:
        super().__init__()
        self.node, self.plane, self.namespace, self.user = node, plane, namespace, user
        self.stopping = threading.Event()
        #: per try, whether its worker's finished pod was still there once the task's clean-up had deleted the
        #: master (the pod that still ran)
        self.kept: list[bool] = []

    def pods(self) -> list[dict]:
        return self.node.list("pods", self.namespace, label_selector=JOB_LABEL)

    def watches(self) -> int:
        return sum(e["verb"] == "watch" for e in self.plane.audit_events(self.user))

    def run(self) -> None:
        seen: set[str] = set()
        watched = self.watches()  # before this try's pods: its wait's watch comes after them
        while not self.stopping.is_set():
            fresh = {p["metadata"]["labels"]["airflow-distributed/role"]: p for p in self.pods()
                     if p["metadata"]["uid"] not in seen and not p["metadata"].get("deletionTimestamp")}
            if len(fresh) < 2:
                time.sleep(0.05)
                continue
            seen |= {p["metadata"]["uid"] for p in fresh.values()}
            master, worker = (fresh[role]["metadata"] for role in ("master", "worker"))
            for pod in (master, worker):
                self.node.run_pod(self.namespace, pod["name"])
            wait_until(lambda before=watched: self.watches() > before, timeout=60)  # this try's wait watches
            self.node.fail_pod(self.namespace, worker["name"], exit_code=2)
            # The task's clean-up deletes the master, which still ran; is the worker's finished pod kept?
            wait_until(lambda uid=master["uid"]: uid not in {p["metadata"]["uid"] for p in self.pods()}, timeout=60)
            self.kept.append(worker["uid"] in {p["metadata"]["uid"] for p in self.pods()})
            watched = self.watches()

    def stop(self) -> None:
        self.stopping.set()
        self.check(30)


@pytest.mark.parametrize("dag_namespace", ["k8s_last_try_fails", "k8s_last_try_fails_deferrable"], indirect=True)
def test_after_the_last_try_nothing_of_the_job_is_left_and_no_request_was_useless(
        control_plane: ControlPlane, node: KubeletNode, dag_namespace: tuple[str, str], capfd):
    namespace, user = dag_namespace
    dag_id = namespace.replace("-", "_")
    player = FailingTries(node, control_plane, namespace, user).play(FailingTries.run)
    try:
        run, states = run_dag_at(dag_id)
    finally:
        player.stop()

    assert states == {"train": "failed"}
    last, earlier = tries(run)
    assert last == 2 and len(earlier) == 1
    out = capfd.readouterr().out
    assert "ReplicaExitedError" in out and "exited with code 2" in out
    # Try 1 kept its finished pods for try 2, which found its job; try 2, the last, kept nothing.
    assert player.kept == [True, False]
    assert "from an earlier try" in out
    assert "the finished ones are kept until the next try" in out  # try 1's message
    assert "; the job was deleted" in out  # try 2's
    control_plane.assert_clean(namespace, user)
    answered = [e for e in control_plane.audit_events(user) if e.get("stage") == "ResponseComplete"]
    # The job has no Secret (no SSH key, no secret files): it never asked to delete one.
    useless = sorted({f"{e['verb']} {e['requestURI']}" for e in answered
                      if (e.get("responseStatus") or {}).get("code") == 404
                      and (e.get("objectRef") or {}).get("resource") == "secrets"})
    assert useless == []
    # Try 2 looks at try 1's job once: the reconnect reads its Service and lists its pods, and the reattach that
    # follows judges that look as it is (no second GET, no second LIST), then deletes the job to start again.
    calls = [(e["verb"], (e.get("objectRef") or {}).get("resource"), (e.get("responseStatus") or {}).get("code"))
             for e in answered]
    first_look = calls.index(("get", "services", 200))
    deleted = calls.index(("delete", "services", 200), first_look)
    assert [call for call in calls[first_look:deleted] if call[1] in ("pods", "services")] == [
        ("get", "services", 200), ("list", "pods", 200)]

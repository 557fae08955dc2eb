"""A kubernetes job's startup phases against the real control plane, sync and deferred: the ``job`` XCom's phases
are the cluster's own timestamps (the pods as the API server serves them, read by the test) and the master's log
timestamps (the test kubelet stamps each line)."""

from __future__ import annotations

import json
import time

import pytest

from airflow_distributed.jobstate.startup import epoch
from airflow_distributed.replica.live_report import record_line
from tests.helpers import run_dag_at, wait_until, xcom
from tests.kube_control_plane.control_plane import ControlPlane
from tests.kube_control_plane.kubelet import KubeletNode
from tests.kubernetes_helpers import DOCUMENT, Kubelet

pytestmark = [pytest.mark.usefixtures("airflow_db")]


@pytest.mark.parametrize("dag_namespace", ["k8s_success", "k8s_deferrable"], indirect=True)
def test_a_jobs_startup_phases_are_the_clusters_own_timestamps(
        control_plane: ControlPlane, node: KubeletNode, dag_namespace: tuple[str, str], capfd):
    namespace, user = dag_namespace
    dag_id = namespace.replace("-", "_")
    seen: dict = {}

    def script(kubelet: Kubelet) -> None:
        wait_until(lambda: any(e["verb"] == "watch" for e in control_plane.audit_events(user)), timeout=60)
        time.sleep(1.1)  # the API's times have whole seconds: started a second after the pods were made
        kubelet.run_all()
        master = kubelet.master
        seen["first_line"] = time.time() + 1.0
        node.append_log(namespace, master, "loading data", container="base", at=seen["first_line"])
        seen["first_progress"] = seen["first_line"] + 1.5
        node.append_log(namespace, master, record_line({"progress": {"step": 1, "total": 3}}) or "",
                        container="base", at=seen["first_progress"])
        node.append_log(namespace, master, "step 1 loss 0.500", container="base", at=seen["first_progress"] + 0.1)
        time.sleep(2.8)  # the lines' times are past now: the follower gets them before the master ends
        seen["pods"] = {name: node.get("pods", namespace, name) for name in kubelet.names().values()}
        # The master's main container ends, its first start kept (as a kubelet keeps it in the terminated state).
        started = next(s["state"]["running"]["startedAt"] for s in seen["pods"][master]["status"]["containerStatuses"]
                       if s["name"] == "base")
        node.set_pod_phase(namespace, master, "Running", container_states={"base": {"terminated": {
            "exitCode": 0, "reason": "Completed", "startedAt": started,
            "finishedAt": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), "message": json.dumps(DOCUMENT)}}})

    kubelet = Kubelet(node, namespace).play(script)
    run, states = run_dag_at(dag_id)
    kubelet.check()

    assert set(states.values()) == {"success"}
    job = xcom(run, "train", "job")
    startup = job["startup"]
    pods = seen["pods"]
    created = min(epoch(pod["metadata"]["creationTimestamp"]) for pod in pods.values())
    assert epoch(startup["created_at"]) == created
    master = f"{job['job_name']}-master-0"
    assert set(startup["replicas"]) == set(pods)
    for name, pod in pods.items():
        row = startup["replicas"][name]
        scheduled = next(c["lastTransitionTime"] for c in pod["status"]["conditions"]
                         if c["type"] == "PodScheduled" and c["status"] == "True")
        started = next(s["state"]["running"]["startedAt"] for s in pod["status"]["containerStatuses"]
                       if s["name"] == "base")
        assert row["created"] == round(epoch(pod["metadata"]["creationTimestamp"]) - created, 3)
        assert row["scheduled"] == round(epoch(scheduled) - created, 3)
        assert row["running"] == round(epoch(started) - created, 3)
        assert row["running"] >= 1.0  # started a second and more after its creation
        # nothing in a pod's status says when it was admitted or its image pulled: unknown, not made up
        assert (row["admitted"], row["image_pulled"]) == (None, None)
        if name == master:  # its log, stamped by the kubelet: the first progress record is its rendezvous
            assert (row["rendezvous"], row["rendezvous_by"]) == (
                round(seen["first_progress"] - created, 3), "progress")
        else:  # the workers' logs are not followed: their rendezvous is unknown
            assert (row["rendezvous"], row["rendezvous_by"]) == (None, None)
    assert startup["job"] == {
        "created": max(row["created"] for row in startup["replicas"].values()), "admitted": None,
        "scheduled": max(row["scheduled"] for row in startup["replicas"].values()), "image_pulled": None,
        "running": max(row["running"] for row in startup["replicas"].values()),
        "rendezvous": startup["replicas"][master]["rendezvous"]}
    assert (startup["rendezvous_by"], startup["slowest"]["rendezvous"]) == ("progress", master)
    assert set(startup["unknown"]) == {"admitted", "image_pulled"}
    out = capfd.readouterr().out
    assert out.count(f"startup of {namespace}/{job['job_name']}: ") + out.count(
        f"startup of {job['job_name']}: ") == 1
    control_plane.assert_clean(namespace, user)

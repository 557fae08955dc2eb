"""An unschedulable replica is said with what it asks (pure): the scheduler names the resource no node has enough
of (``Insufficient cpu``), not the request, and what a waiter keeps of a pod (``pod_essentials``, the triggers')
keeps that request."""

from __future__ import annotations

from airflow_distributed.jobstate.pod_state import pod_essentials, waiting_reason
from airflow_distributed.manifests.pod_names import MAIN_CONTAINER

MESSAGE = "0/1 nodes are available: 1 Insufficient cpu."


def unschedulable(requests: dict | None) -> dict:
    main = {"name": MAIN_CONTAINER, "image": "trainer:1", **({"resources": {"requests": requests}} if requests else {})}
    sidecar = {"name": "airflow-xcom-sidecar", "image": "busybox", "resources": {"requests": {"cpu": "1m"}}}
    return {"metadata": {"name": "j-worker-0"}, "spec": {"containers": [main, sidecar]},
            "status": {"phase": "Pending", "conditions": [
                {"type": "PodScheduled", "status": "False", "reason": "Unschedulable", "message": MESSAGE}]}}


def test_the_schedulers_reason_is_followed_by_what_the_replicas_container_asks_also_from_the_essentials() -> None:
    pod = unschedulable({"memory": "32Mi", "cpu": "512"})
    said = ("Unschedulable", f"{MESSAGE} (the replica asks cpu 512, memory 32Mi)")
    assert waiting_reason(pod) == said
    assert waiting_reason(pod_essentials(pod)) == said


def test_a_replica_asking_nothing_is_said_as_the_scheduler_says_it() -> None:
    assert waiting_reason(unschedulable(None)) == ("Unschedulable", MESSAGE)
    kept = pod_essentials(unschedulable(None))["spec"]["containers"][0]
    assert kept == {"name": MAIN_CONTAINER, "image": "trainer:1"}

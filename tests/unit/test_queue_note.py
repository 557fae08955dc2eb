"""Why a job waits for capacity, and since when (``replica_table.queue_note_of``), as the task log and the job view
say it: from the queued pods' ``PodScheduled`` condition (pure)."""

from __future__ import annotations

from datetime import datetime, timezone

from airflow_distributed.jobstate.replica_table import queue_note_of
from airflow_distributed.plugins.live_kubernetes import live_record

SINCE = "2026-11-25T15:02:11Z"
MESSAGE = "0/3 nodes are available: 3 Insufficient nvidia.com/gpu."


def pod(name: str, role: str, index: int, *, queued: bool) -> dict:
    labels = {"airflow-distributed/role": role, "airflow-distributed/index": str(index),
              "airflow-distributed/master": str(role == "master").lower()}
    status: dict = {"phase": "Pending", "conditions": [
        {"type": "PodScheduled", "status": "False", "reason": "Unschedulable", "message": MESSAGE,
         "lastTransitionTime": SINCE}]} if queued else {
        "phase": "Running", "containerStatuses": [{"name": "base", "state": {"running": {}}}]}
    return {"metadata": {"name": name, "labels": labels, "creationTimestamp": "2026-11-25T15:02:10Z"},
            "spec": {} if queued else {"nodeName": "node-1"}, "status": status}


def test_the_note_names_the_first_queued_replica_the_schedulers_words_and_since_when() -> None:
    pods = [pod("j-master-0", "master", 0, queued=False), pod("j-worker-0", "worker", 0, queued=True),
            pod("j-worker-1", "worker", 1, queued=True)]
    note = queue_note_of([(p["metadata"]["name"], p) for p in pods] + [("j-worker-2", None)])
    assert note == (f"2 of 4 replicas wait to be scheduled since {SINCE}: j-worker-0 (and 1 more): Unschedulable: "
                    f"{MESSAGE}")
    assert queue_note_of([("j-master-0", pods[0])]) is None


def test_the_live_job_view_says_why_the_job_waits() -> None:
    pods = [pod("j-worker-0", "worker", 0, queued=True), pod("j-master-0", "master", 0, queued=False)]
    record = live_record("j", "ml", "pytorch", pods, {})
    assert record["note"] == (f"Waiting for capacity: 1 of 2 replicas wait to be scheduled since {SINCE}: "
                              f"j-worker-0: Unschedulable: {MESSAGE}")
    assert [r["name"] for r in record["replicas"]] == ["j-master-0", "j-worker-0"]
    assert "note" not in live_record("j", "ml", "pytorch", pods[1:], {})


def test_the_live_job_view_shows_the_try_s_usage_so_far() -> None:
    # The master has run since 15:02:20 with 2 cores requested; the queued worker has not started: 40 s at "now".
    master = pod("j-master-0", "master", 0, queued=False)
    master["spec"]["containers"] = [{"name": "base", "resources": {"requests": {"cpu": "2", "memory": "1Gi"}}}]
    master["status"]["startTime"] = "2026-11-25T15:02:20Z"
    master["status"]["containerStatuses"][0]["state"] = {"running": {"startedAt": "2026-11-25T15:02:20Z"}}
    now = datetime(2026, 11, 25, 15, 3, 0, tzinfo=timezone.utc).timestamp()
    usage = live_record("j", "ml", "pytorch", [master, pod("j-worker-0", "worker", 0, queued=True)], {},
                        now=now)["usage"]
    assert (usage["wall_seconds"], usage["cpu_seconds"], usage["memory_gib_seconds"]) == (50.0, 80.0, 40.0)
    assert usage["replicas"]["j-worker-0"]["runs"] == 0


def test_the_live_view_of_a_kubeflow_job_says_why_it_waits_as_its_task_log_does() -> None:
    from airflow_distributed.plugins.live_kubernetes import JobLocation, kubeflow_live_record

    location = JobLocation("j", "ml", None, None, backend="kubeflow", framework="pytorch")
    queued = queue_note_of([("j-worker-0", pod("j-worker-0", "worker", 0, queued=True))])
    record = kubeflow_live_record(location, "ml", "pytorch", ({"status": {}}, (), None, queued), {}, None)
    assert record["note"] == (f"Waiting for capacity: 1 of 1 replicas wait to be scheduled since {SINCE}: "
                              f"j-worker-0: Unschedulable: {MESSAGE}")
    # Suspended (Kueue): since the job's own Suspended condition.
    suspended = {"spec": {"runPolicy": {"suspend": True}}, "status": {"conditions": [
        {"type": "Suspended", "status": "True", "lastTransitionTime": SINCE}]}}
    record = kubeflow_live_record(location, "ml", "pytorch", (suspended, (), None, None), {}, None)
    assert record["note"].startswith(f"Waiting for capacity: the job waits to be admitted (suspended) since {SINCE}: "
                                     "Suspended: the job is suspended")
    assert "note" not in kubeflow_live_record(location, "ml", "pytorch", ({"status": {}}, (), None, None), {}, None)

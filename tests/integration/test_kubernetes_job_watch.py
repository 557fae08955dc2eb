"""The pure parts of the Kubernetes backend: the job's verdict from its pods, the watch protocol, log cursors,
retry policy. Table-driven; pods are the API server's JSON as the emulator and real clusters send it."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

import pytest
from kubernetes.client import ApiException

from airflow_distributed.hooks.api_retry import RetryPolicy, short_error
from airflow_distributed.jobstate.job_watch import JobTracker, JobWatch
from airflow_distributed.jobstate.log_cursor import LogCursor, parse_timestamp_ns
from airflow_distributed.jobstate.replica_table import replica_table
from airflow_distributed.jobstate.verdicts import JobVerdict, ReplicaSlot, slots_from_json, slots_to_json
from airflow_distributed.jobstate.watch_stream import WatchError, WatchGone
from airflow_distributed.status import ReplicaStatus

SLOTS = (ReplicaSlot("j-master-0", "master", 0, True), ReplicaSlot("j-worker-0", "worker", 0),
         ReplicaSlot("j-worker-1", "worker", 1))


IMAGE = "registry.example.com/trainer:1.0"
PULL_FAILED = 'failed to pull and unpack image "registry.example.com/trainer:1.0": not found'


def running() -> dict:
    return {"running": {"startedAt": "2026-01-01T00:00:00Z"}}


def terminated(code: int, reason: str = "Error", at: str = "2026-01-01T00:01:00Z", message: str | None = None) -> dict:
    state = {"exitCode": code, "reason": reason, "finishedAt": at}
    if message:
        state["message"] = message
    return {"terminated": state}


def waiting(reason: str, message: str = "") -> dict:
    return {"waiting": {"reason": reason, "message": message}}


def pod(name: str, phase: str = "Running", base: dict | None = None, init: dict | None = None,
        unschedulable: str | None = None, reason: str | None = None) -> dict:
    status: dict[str, Any] = {"phase": phase}
    if unschedulable is not None:
        status["conditions"] = [{"type": "PodScheduled", "status": "False", "reason": "Unschedulable",
                                 "message": unschedulable}]
    else:
        status["containerStatuses"] = [{"name": "base", "state": base or running(), "restartCount": 0}]
        if init is not None:
            status["initContainerStatuses"] = [{"name": "wait-for-peers", "state": init}]
    if reason:
        status["reason"] = reason
    spec: dict[str, Any] = {"containers": [{"name": "base", "image": IMAGE}]}
    if unschedulable is None:
        spec["nodeName"] = "node-1"
    return {"metadata": {"name": name, "resourceVersion": "1"}, "spec": spec, "status": status}


@dataclass
class Case:
    name: str
    pods: list[dict]
    expected: dict | None  # JobVerdict.as_dict(), or None while the job runs
    now: float = 10.0
    deleted: list[str] = field(default_factory=list)


CASES = [
    Case("all running", [pod(s.name) for s in SLOTS], None),
    Case("master's base exits 0 (sidecar keeps the pod Running)",
         [pod("j-master-0", base=terminated(0, "Completed")), pod("j-worker-0"), pod("j-worker-1")],
         {"state": "succeeded", "replica": "j-master-0"}),
    Case("a worker exits non-zero", [pod("j-master-0"), pod("j-worker-0"), pod("j-worker-1", "Failed", terminated(3))],
         {"state": "failed", "replica": "j-worker-1", "cause": "exit", "exit_code": 3, "reason": "Error",
          "container": "base"}),
    Case("the first of several failures is the cause",
         [pod("j-master-0", base=terminated(1, at="2026-01-01T00:02:00Z")), pod("j-worker-0"),
          pod("j-worker-1", "Failed", terminated(137, "OOMKilled", at="2026-01-01T00:01:00Z"))],
         {"state": "failed", "replica": "j-worker-1", "cause": "exit", "exit_code": 137, "reason": "OOMKilled",
          "container": "base"}),
    Case("the master is OOMKilled", [pod("j-master-0", base=terminated(137, "OOMKilled")), pod("j-worker-0"),
                                     pod("j-worker-1")],
         {"state": "failed", "replica": "j-master-0", "cause": "exit", "exit_code": 137, "reason": "OOMKilled",
          "container": "base"}),
    Case("a worker gave up waiting for its peers",
         [pod("j-master-0"), pod("j-worker-0", "Failed", waiting("PodInitializing"), init=terminated(1)),
          pod("j-worker-1")],
         {"state": "failed", "replica": "j-worker-0", "cause": "exit", "exit_code": 1, "reason": "Error",
          "container": "wait-for-peers"}),
    Case("a pod evicted", [pod("j-master-0"), pod("j-worker-0", "Failed", waiting("ContainerCreating"),
                                                  reason="Evicted"), pod("j-worker-1")],
         {"state": "failed", "replica": "j-worker-0", "cause": "pod", "reason": "Evicted", "disruption": "Evicted"}),
    Case("an image name that can never be pulled fails at once",
         [pod("j-master-0"), pod("j-worker-0", "Pending", waiting("InvalidImageName", "bad name")), pod("j-worker-1")],
         {"state": "failed", "replica": "j-worker-0", "cause": "image", "reason": "InvalidImageName",
          "message": "bad name", "image": IMAGE}, now=1.0),
    Case("a failed pull fails at once, long before the startup deadline",
         [pod("j-master-0"), pod("j-worker-0"), pod("j-worker-1", "Pending", waiting("ErrImagePull", PULL_FAILED))],
         {"state": "failed", "replica": "j-worker-1", "cause": "image", "reason": "ErrImagePull",
          "message": PULL_FAILED, "image": IMAGE}, now=1.0),
    Case("a missing Secret waits for startup_timeout (it may still be created)",
         [pod("j-master-0"), pod("j-worker-0"), pod("j-worker-1", "Pending", waiting(
             "CreateContainerConfigError", 'secret "wandb" not found'))], None, now=59),
    Case("unschedulable inside the startup window: keep waiting",
         [pod("j-master-0"), pod("j-worker-0", "Pending", unschedulable="0/1 nodes"), pod("j-worker-1")], None, now=59),
    Case("unschedulable past the startup window",
         [pod("j-master-0"), pod("j-worker-0", "Pending", unschedulable="0/1 nodes are available"), pod("j-worker-1")],
         {"state": "failed", "replica": "j-worker-0", "cause": "startup", "reason": "Unschedulable",
          "message": "0/1 nodes are available"}, now=61),
    Case("image pull back-off",
         [pod("j-master-0"), pod("j-worker-0"), pod("j-worker-1", "Pending", waiting("ImagePullBackOff", "Back-off"))],
         {"state": "failed", "replica": "j-worker-1", "cause": "image", "reason": "ImagePullBackOff",
          "message": "Back-off", "image": IMAGE}, now=1.0),
    Case("waiting for peers within the window", [pod("j-master-0"), pod("j-worker-0", "Pending", waiting(
        "PodInitializing"), init=running()), pod("j-worker-1")], None, now=59),
    # A master that never listens: the readiness step would wait out its own limit (minutes) without this.
    Case("still waiting for peers past the window", [pod("j-master-0"), pod("j-worker-0", "Pending", waiting(
        "PodInitializing"), init=running()), pod("j-worker-1")],
         {"state": "failed", "replica": "j-worker-0", "cause": "startup", "reason": "WaitingForPeers",
          "message": "its readiness step (wait-for-peers) still waits for its peers to accept connections"}, now=61),
    Case("a pod never created, past the window", [pod("j-master-0"), pod("j-worker-0")],
         {"state": "failed", "replica": "j-worker-1", "cause": "startup", "reason": "NotCreated",
          "message": "the pod does not exist"}, now=61),
    Case("a running pod deleted", [pod("j-master-0"), pod("j-worker-0"), pod("j-worker-1")],
         {"state": "failed", "replica": "j-worker-1", "cause": "deleted"}, deleted=["j-worker-1"]),
    Case("a worker that finished, then deleted, is no failure",
         [pod("j-master-0"), pod("j-worker-0", "Succeeded", terminated(0, "Completed")), pod("j-worker-1")], None,
         deleted=["j-worker-0"]),
]


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_the_verdict_of_a_job_from_its_pods(case: Case):
    tracker = JobTracker(SLOTS, startup_timeout=60, started_at=0.0)
    tracker.reset(case.pods)
    for name in case.deleted:
        tracker.apply("DELETED", next(p for p in case.pods if p["metadata"]["name"] == name))
    verdict = tracker.verdict(case.now)
    assert (verdict.as_dict() if verdict else None) == case.expected


def test_a_failed_pull_within_the_grace_waits_and_one_that_recovers_is_forgotten():
    tracker = JobTracker(SLOTS, startup_timeout=600, started_at=0.0, image_pull_grace=30)
    tracker.reset([pod("j-master-0"), pod("j-worker-0"), pod("j-worker-1", "Pending", waiting("ErrImagePull"))])
    assert tracker.verdict(10.0) is None
    assert tracker.seconds_to_deadline(10.0) == 30  # the watch wakes up when the grace ends, not at 600 s
    tracker.apply("MODIFIED", pod("j-worker-1", "Pending", waiting("ImagePullBackOff", "Back-off")))
    assert tracker.verdict(39.0) is None
    tracker.apply("MODIFIED", pod("j-worker-1", "Pending", waiting("ContainerCreating")))  # the registry is back
    assert tracker.verdict(45.0) is None and tracker.pull_failures == {}
    tracker.apply("MODIFIED", pod("j-worker-1", "Pending", waiting("ErrImagePull", PULL_FAILED)))
    assert tracker.verdict(50.0) is None  # a new failure, a new grace
    verdict = tracker.verdict(80.0)
    assert verdict.as_dict() == {"state": "failed", "replica": "j-worker-1", "cause": "image",
                                 "reason": "ErrImagePull", "message": PULL_FAILED, "image": IMAGE}
    assert verdict.describe(600) == (f'replica j-worker-1: image "{IMAGE}" could not be pulled '
                                     f"(ErrImagePull: {PULL_FAILED})")


def test_an_invalid_image_name_fails_at_once_whatever_the_grace():
    tracker = JobTracker(SLOTS, startup_timeout=600, started_at=0.0, image_pull_grace=300)
    tracker.reset([pod("j-master-0", "Pending", waiting("InvalidImageName", "couldn't parse image name"))])
    assert tracker.verdict(1.0).describe() == (
        f"replica j-master-0: image \"{IMAGE}\" is not a valid image name (InvalidImageName: couldn't parse image "
        "name)")


def test_pull_failures_carry_over_between_trackers_that_share_them():
    failures: dict[str, float] = {}
    pods = [pod("j-master-0"), pod("j-worker-0", "Pending", waiting("ErrImagePull")), pod("j-worker-1")]
    for now, expected in ((0.0, None), (20.0, None), (31.0, "j-worker-0")):
        tracker = JobTracker(SLOTS, startup_timeout=float("inf"), started_at=now, image_pull_grace=30,
                             pull_failures=failures)
        tracker.reset(pods)
        verdict = tracker.verdict(now)
        assert (verdict.replica if verdict else None) == expected


def test_a_failure_once_seen_stays_even_if_the_master_then_succeeds():
    tracker = JobTracker(SLOTS, startup_timeout=60, started_at=0.0)
    tracker.reset([pod("j-master-0"), pod("j-worker-0", "Failed", terminated(2)), pod("j-worker-1")])
    assert tracker.verdict(1).replica == "j-worker-0"
    tracker.apply("MODIFIED", pod("j-master-0", base=terminated(0, "Completed")))
    assert tracker.verdict(2).replica == "j-worker-0" and not tracker.verdict(2).succeeded


def test_replica_rows_say_where_a_replica_is_and_why_it_waits():
    tracker = JobTracker(SLOTS, startup_timeout=60, started_at=0.0)
    tracker.reset([pod("j-master-0", base=terminated(0, "Completed")),
                   pod("j-worker-0", "Pending", waiting("ErrImagePull"))])
    assert tracker.statuses() == (
        ReplicaStatus("j-master-0", "master", 0, "succeeded", 0, "node-1"),
        ReplicaStatus("j-worker-0", "worker", 0, "pending", None, "node-1", 0, "ErrImagePull"),
        ReplicaStatus("j-worker-1", "worker", 1, "pending"),
    )
    assert tracker.missing() == ["j-worker-1"]


def test_the_watch_protocol_bookmarks_errors_and_the_next_timeout():
    tracker = JobTracker(SLOTS, startup_timeout=60, started_at=0.0)
    watch = JobWatch(tracker)
    assert watch.needs_list
    items = [pod(s.name, "Pending", waiting("X")) for s in SLOTS]
    watch.on_list({"metadata": {"resourceVersion": "10"}, "items": items})
    assert watch.resource_version == "10" and not watch.needs_list
    assert watch.on_line(json.dumps({"type": "BOOKMARK", "object": {"kind": "Pod", "metadata": {
        "resourceVersion": "15"}}})) is False
    assert watch.resource_version == "15"
    changed = pod("j-master-0")
    changed["metadata"]["resourceVersion"] = "17"
    assert watch.on_line(json.dumps({"type": "MODIFIED", "object": changed}).encode()) is True
    assert watch.resource_version == "17"
    assert watch.watch_seconds(now=50.0, longest=300) == 10  # not past the startup deadline
    with pytest.raises(WatchError):
        watch.on_line(json.dumps({"type": "ERROR", "object": {"code": 500, "reason": "InternalError"}}))
    with pytest.raises(WatchGone):
        watch.on_line(json.dumps({"type": "ERROR", "object": {"code": 410, "reason": "Expired"}}))
    assert watch.needs_list


def test_a_log_cursor_drops_exactly_the_lines_a_reconnect_repeats():
    cursor = LogCursor()
    first = ["2026-01-01T00:00:01.100Z a", "2026-01-01T00:00:01.200Z b", "2026-01-01T00:00:01.200Z c"]
    assert [cursor.accept(line) for line in first] == ["a", "b", "c"]
    assert cursor.since_time() == "2026-01-01T00:00:01Z"  # whole seconds: the reconnect repeats a, b and c
    cursor.reconnecting()
    again = [*first, "2026-01-01T00:00:01.200Z d", "2026-01-01T00:00:02Z e"]
    assert [cursor.accept(line) for line in again] == [None, None, None, "d", "e"]


@pytest.mark.parametrize(("text", "expected"), [
    ("2026-01-01T00:00:00Z", 1767225600 * 10**9),
    ("2026-01-01T00:00:00.5Z", 1767225600 * 10**9 + 500_000_000),
    ("2026-01-01T00:00:00.123456789Z", 1767225600 * 10**9 + 123_456_789),
    ("2026-01-01T01:00:00.25+01:00", 1767225600 * 10**9 + 250_000_000),
])
def test_log_timestamps_keep_their_nanoseconds(text, expected):
    assert parse_timestamp_ns(text) == expected


def test_slots_travel_as_json_and_the_first_is_the_master():
    data = slots_to_json(SLOTS)
    assert json.loads(json.dumps(data)) == [["j-master-0", "master", 0], ["j-worker-0", "worker", 0],
                                            ["j-worker-1", "worker", 1]]
    assert slots_from_json(data) == SLOTS


def test_a_big_jobs_table_shows_counts_and_the_rows_worth_a_look():
    rows = [ReplicaStatus(f"j-worker-{i}", "worker", i, "running", where="node") for i in range(100)]
    rows[7] = ReplicaStatus("j-worker-7", "worker", 7, "failed", 1, "node", 0, "Error")
    table = replica_table(rows)
    assert table.splitlines()[0] == "100 replicas: 99 running, 1 failed"
    assert "j-worker-7" in table and "j-worker-0" in table and "j-worker-50" not in table


def test_verdict_descriptions_name_the_replica_and_the_reason():
    assert JobVerdict("failed", "j-worker-1", "exit", 137, "OOMKilled").describe() == (
        "replica j-worker-1 exited with code 137 (OOMKilled)")
    assert JobVerdict("failed", "j-worker-1", "exit", 1, "Error", container="wait-for-peers").describe() == (
        "replica j-worker-1 exited with code 1 (container wait-for-peers)")
    assert JobVerdict("failed", "j-worker-0", "deleted").describe() == "the pod of replica j-worker-0 was deleted"


# ---------------------------------------------------------------------------------------------- retries


def api_error(status: int, reason: str, body: dict | None = None, headers: dict | None = None) -> ApiException:
    error = ApiException(status=status, reason=reason)
    error.body = json.dumps(body).encode() if body is not None else None
    error.headers = headers
    return error


@pytest.mark.parametrize(("error", "delay"), [
    (api_error(500, "Internal Server Error"), 1.0),
    (api_error(429, "Too Many Requests", headers={"Retry-After": "3"}), 3.0),
    (api_error(503, "Service Unavailable", headers={"Retry-After": "120"}), 10.0),  # capped at max_delay
    (ConnectionResetError(104, "Connection reset by peer"), 1.0),
    (api_error(409, "Conflict"), None),
    (api_error(422, "Unprocessable Entity"), None),
    (api_error(403, "Forbidden"), None),
    (ValueError("not an API error"), None),
])
def test_only_transient_failures_are_retried(error, delay):
    assert RetryPolicy(attempts=3, initial_delay=1.0, max_delay=10.0, jitter=0.0).delay(0, error) == delay


def test_retries_stop_after_the_last_attempt_and_back_off_exponentially():
    policy = RetryPolicy(attempts=4, initial_delay=0.5, max_delay=1.5, jitter=0.0)
    assert [policy.delay(i, api_error(500, "x")) for i in range(4)] == [0.5, 1.0, 1.5, None]


def test_api_errors_read_as_one_short_line():
    body = {"kind": "Status", "status": "Failure", "reason": "Forbidden", "code": 403,
            "message": 'pods "j-worker-1" is forbidden: error looking up service account ml/trainer'}
    assert short_error(api_error(403, "Forbidden", body)) == (
        '403 Forbidden: pods "j-worker-1" is forbidden: error looking up service account ml/trainer')
    assert short_error(ConnectionResetError(104, "Connection reset by peer")) == (
        "ConnectionResetError: [Errno 104] Connection reset by peer")


def test_a_rescheduled_sensor_counts_a_failing_pull_from_the_pods_start():
    # A reschedule-mode poke is a new sensor: what it knows of a failing pull is the pod's status.startTime.
    from airflow_distributed.jobstate.log_cursor import parse_timestamp_ns
    from airflow_distributed.sensors.base import pod_start_times

    failing = pod("j-worker-0", "Pending", waiting("ErrImagePull", PULL_FAILED))
    failing["status"]["startTime"] = "2026-01-01T00:00:00Z"
    pods = [pod("j-master-0"), failing, pod("j-worker-1")]
    started = parse_timestamp_ns("2026-01-01T00:00:00Z") / 10**9
    for seconds_later, expected in ((100.0, None), (601.0, "j-worker-0")):
        tracker = JobTracker(SLOTS, startup_timeout=float("inf"), started_at=0.0, image_pull_grace=600,
                             pull_failures=pod_start_times(pods))
        tracker.reset(pods)
        verdict = tracker.verdict(started + seconds_later)
        assert (verdict.replica if verdict else None) == expected

"""``JobEvent``: a trigger's event, typed, and the payload dict the triggers fire, key for key.

The payloads read here are the triggers' own, fired by their ``run`` (or built by their ending code) with no
cluster: a deadline already passed, a kube-config that cannot be loaded, an API server on 127.0.0.1 that refuses
every request, a Ray Jobs API on 127.0.0.1 (``test_ray_jobs_api_outage``'s; or nothing listening). The verdicts of
a watched job's pods are the integration tests' (``test_kubernetes_trigger.py``).
"""

from __future__ import annotations

import asyncio
import json
import threading
import time
from collections.abc import Iterator
from http.server import ThreadingHTTPServer
from typing import Any

import pytest
import yaml

from airflow_distributed.jobstate.job_event import EventKind, JobEvent
from airflow_distributed.jobstate.object_wait import judge_object_wait
from airflow_distributed.jobstate.object_watch import ObjectWatch
from airflow_distributed.jobstate.outcome import Ending, JobOutcome
from airflow_distributed.jobstate.pending_pods import PendingPods
from airflow_distributed.jobstate.verdicts import JobVerdict
from airflow_distributed.outputs import job_result, parse_output_document
from airflow_distributed.status import ReplicaState, ReplicaStatus, render_table
from airflow_distributed.triggers.kubeflow import KubeflowJobTrigger
from airflow_distributed.triggers.kubernetes import DistributedJobTrigger
from airflow_distributed.triggers.ray import RayJobTrigger
from tests.unit.test_ray_jobs_api_outage import JOB, JobsApi, port  # noqa: F401 (a fixture: its Ray connection)

NS = "ml"
REPLICAS = [[f"{JOB}-master-0", "master", 0], [f"{JOB}-worker-0", "worker", 0]]
FAILED_VERDICT = JobVerdict(ReplicaState.FAILED, f"{JOB}-worker-0", Ending.EXITED, 137, "OOMKilled",
                            container="base")

#: One event of each kind, every field its kind carries in a trigger's payload.
EVENTS = [
    JobEvent(EventKind.SUCCEEDED, JOB, NS, 1.5, {"framework": "pytorch"}, REPLICAS,
             verdict=JobVerdict(ReplicaState.SUCCEEDED, f"{JOB}-master-0"),
             log_cursor={"uid": "u1", "line": 3}),
    JobEvent(EventKind.FAILED, JOB, NS, 1.5, replicas=REPLICAS, verdict=FAILED_VERDICT),
    JobEvent(EventKind.FAILED, JOB, NS, 1.5, {"framework": "pytorch"}, reason="ImagePullFailed",
             message="replica x: image ...", verdict=JobVerdict(ReplicaState.FAILED, "x", Ending.IMAGE),
             taken_away={"pods": {}}),
    JobEvent(EventKind.TIMEOUT, JOB, NS, 1.5, message=f"job {NS}/{JOB} reached the task's execution_timeout"),
    JobEvent(EventKind.TIMEOUT, JOB, resume_state={"framework": "pytorch"}, elapsed=2.5, message="Ray job ..."),
    JobEvent(EventKind.ERROR, JOB, NS, 1.5, message="listing pods: 403 Forbidden", error_class="ClusterRefusedError"),
    JobEvent(EventKind.DELETED, JOB, NS, 1.5, message=f"PyTorchJob {NS}/{JOB} was deleted before it finished"),
    JobEvent(EventKind.FINAL, JOB, resume_state={"framework": "pytorch"}, state="SUCCEEDED"),
]


@pytest.mark.parametrize("event", EVENTS, ids=lambda event: event.kind.value)
def test_every_kind_of_event_goes_to_its_payload_and_back(event):
    payload = event.to_payload()

    assert JobEvent.from_payload(payload) == event
    # Plain JSON: what the triggerer stores and the task reads is what it was before the enums.
    assert json.loads(json.dumps(payload)) == payload
    assert type(payload["status"]) is str and payload["status"] == event.kind.value
    if event.verdict is not None:
        assert not any(isinstance(value, (ReplicaState, Ending)) for value in payload["verdict"].values())
    assert None not in payload.values()


def test_every_kind_is_covered():
    assert {event.kind for event in EVENTS} == set(EventKind)


def test_a_payload_that_is_no_job_event_is_refused_naming_what_is_allowed():
    with pytest.raises(ValueError, match=r"'status' 'exploded' is not one of succeeded, failed, timeout, error, "
                                         r"deleted, final"):
        JobEvent.from_payload({"job_name": JOB, "status": "exploded"})
    with pytest.raises(ValueError, match=r"has no 'status'"):
        JobEvent.from_payload({"job_name": JOB})
    with pytest.raises(ValueError, match=r"'oops' is not a valid ReplicaState"):
        JobEvent.from_payload({"status": "failed", "verdict": {"state": "oops"}})
    # What a sensor is resumed with after a TimeDeltaTrigger (no job event), and nothing at all.
    assert JobEvent.read(None) is None and JobEvent.read({"moment": 1.0}) is None


def test_the_enums_are_their_strings_in_json_messages_and_tables():
    assert ReplicaState.FAILED == "failed" and Ending.EXITED == "exit" and EventKind.ERROR == "error"
    assert json.dumps({"state": ReplicaState.SUCCEEDED, "ending": Ending.GAVE_UP}) == \
        '{"state": "succeeded", "ending": "gave_up"}'
    assert f"{ReplicaState.PENDING} {Ending.QUEUED!s}" == "pending queue"
    row = ReplicaStatus("a", "master", 0, "pending", reason="Unschedulable")  # type: ignore[arg-type]
    assert row.state is ReplicaState.PENDING and row.as_dict()["state"].__class__ is str
    assert render_table([row]).splitlines()[1].split()[:5] == ["a", "master", "0", "pending", "(Unschedulable)"]
    # The returned value (logged by Airflow as its repr) and the ``job`` XCom hold the bare words.
    result = job_result(job_name=JOB, framework="pytorch", backend="kubernetes", state=ReplicaState.SUCCEEDED,
                        document=parse_output_document(None), replicas=[row])
    assert "ReplicaState" not in repr(result) and (result["state"], result["replicas"][0]["state"]) == (
        "succeeded", "pending")
    assert JobOutcome("exit").ending is Ending.EXITED  # type: ignore[arg-type]
    with pytest.raises(ValueError, match=r"ending 'exited' is not one of succeeded, exit, pod, deleted"):
        JobOutcome("exited")  # type: ignore[arg-type]


# ---------------------------------------------------------------------------------------------- real payloads


def _fired(trigger: Any) -> dict[str, Any]:
    async def first() -> dict[str, Any]:
        return (await anext(trigger.run())).payload

    return asyncio.run(first())


def _read_back(payload: dict[str, Any]) -> JobEvent:
    """The event of ``payload``, which goes back to the same payload (the keys of a value ``None`` aside)."""
    event = JobEvent.from_payload(payload)
    assert event.to_payload() == {key: value for key, value in payload.items() if value is not None}
    assert list(event.to_payload()) == [key for key, value in payload.items() if value is not None]  # same order
    return event


def _pods_trigger(**kwargs: Any) -> DistributedJobTrigger:
    return DistributedJobTrigger(job_name=JOB, namespace=NS, replicas=REPLICAS, startup_timeout=30.0, started_at=1.5,
                                 kubernetes_conn_id=None, **kwargs)


def test_the_pods_trigger_at_its_deadline_fires_a_timeout_event(tmp_path):
    payload = _fired(_pods_trigger(connection_extras={"kube_config_path": str(tmp_path / "none")},
                                   execution_deadline=time.time() - 1, resume_state={"framework": "pytorch"}))

    event = _read_back(payload)
    assert (event.kind, event.job_name, event.namespace, event.started_at) == (EventKind.TIMEOUT, JOB, NS, 1.5)
    assert event.message == f"job {NS}/{JOB} reached the task's execution_timeout"
    assert (event.replicas, event.resume_state) == (REPLICAS, {"framework": "pytorch"})


def test_a_trigger_that_cannot_load_its_kube_config_fires_an_error_event(tmp_path):
    config = tmp_path / "config"
    config.write_text("apiVersion: v1\nkind: Config\n")
    payload = _fired(_pods_trigger(connection_extras={"kube_config_path": str(config)},
                                   execution_deadline=time.time() + 30))

    event = _read_back(payload)
    assert event.kind == EventKind.ERROR and "current-context" in (event.message or "")
    assert event.error_class is None and event.resume_state is None  # not a package error; nothing handed over


class Refusing(JobsApi):
    """An API server that refuses every request (403), as it does a task whose rights were taken away."""

    def do_GET(self) -> None:
        data = json.dumps({"kind": "Status", "apiVersion": "v1", "status": "Failure", "reason": "Forbidden",
                           "message": "pods is forbidden", "code": 403}).encode()
        self.send_response(403)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)


@pytest.fixture
def refusing_config(tmp_path) -> Iterator[str]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), Refusing)
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    thread.start()
    config = tmp_path / "config"
    config.write_text(yaml.safe_dump({
        "apiVersion": "v1", "kind": "Config", "current-context": "c",
        "clusters": [{"name": "c", "cluster": {"server": f"http://127.0.0.1:{server.server_address[1]}"}}],
        "contexts": [{"name": "c", "context": {"cluster": "c", "user": "u"}}],
        "users": [{"name": "u", "user": {"token": "t"}}],
    }))
    yield str(config)
    server.shutdown()
    server.server_close()


def test_a_refused_watch_fires_an_error_event_naming_the_error_class(refusing_config):
    payload = _fired(_pods_trigger(connection_extras={"kube_config_path": refusing_config},
                                   execution_deadline=time.time() + 30))

    event = _read_back(payload)
    assert (event.kind, event.error_class) == (EventKind.ERROR, "ClusterRefusedError")
    assert "403" in (event.message or "")


def _kubeflow_trigger(**kwargs: Any) -> KubeflowJobTrigger:
    kwargs.setdefault("kubernetes_conn_id", None)
    return KubeflowJobTrigger(job_name=JOB, namespace=NS, group="kubeflow.org", version="v1", plural="pytorchjobs",
                              started_at=1.5, **kwargs)


def _job(condition: str, reason: str | None = None) -> dict[str, Any]:
    found: dict[str, Any] = {"type": condition, "status": "True", "message": f"PyTorchJob {JOB} is {condition}."}
    if reason is not None:
        found["reason"] = reason
    return {"kind": "PyTorchJob", "metadata": {"name": JOB, "namespace": NS}, "status": {"conditions": [found]}}


def test_the_kubeflow_triggers_events_are_read(tmp_path):
    """Each ending of the custom-object trigger (``KubeflowJobTrigger._ending`` of the wait's one judge,
    ``judge_object_wait``), as it builds it today."""
    clock = time.monotonic
    trigger = _kubeflow_trigger()

    def ending(watch: ObjectWatch, pending: PendingPods | None = None, ended: bool = True) -> JobEvent:
        end = judge_object_wait(watch, trigger.kind.status_of, pending.verdict if pending else None, None)
        return _read_back(trigger._ending(end if ended else None).to_payload())

    deleted = ObjectWatch(JOB)
    deleted.on_list({"items": [_job("Running")]})
    deleted.on_list({"items": []})
    event = ending(deleted)
    assert (event.kind, event.message) == (EventKind.DELETED, f"pytorchjobs {NS}/{JOB} was deleted before it finished")

    for condition, reason, kind in (("Succeeded", "PyTorchJobSucceeded", EventKind.SUCCEEDED),
                                    ("Failed", "PyTorchJobFailed", EventKind.FAILED),
                                    ("Succeeded", None, EventKind.SUCCEEDED)):
        watch = ObjectWatch(JOB)
        watch.on_list({"items": [_job(condition, reason)]})
        event = ending(watch)
        assert (event.kind, event.reason, event.verdict) == (kind, reason or condition, None)
        assert event.message == f"PyTorchJob {JOB} is {condition}."

    queued = PendingPods(1.0, 0.0, clock, queue_timeout=0.0)
    queued.on_job(suspended=True)
    waiting = ObjectWatch(JOB)
    waiting.on_list({"items": [_job("Created")]})
    event = ending(waiting, queued)
    assert event.kind == EventKind.FAILED and event.verdict is not None
    assert (event.verdict.state, event.verdict.cause, event.reason) == (ReplicaState.FAILED, Ending.QUEUED,
                                                                         "QueueTimedOut")

    event = ending(waiting, ended=False)
    assert (event.kind, event.message) == (EventKind.TIMEOUT, f"pytorchjobs {NS}/{JOB} reached the task's "
                                                              "execution_timeout")


def test_the_kubeflow_trigger_at_its_deadline_fires_a_timeout_event(refusing_config, monkeypatch):
    # Its connection is Airflow's: one whose API server refuses all; the wait is over before it asks anything.
    monkeypatch.setenv("AIRFLOW_CONN_KUBE_EVENTS", json.dumps({"conn_type": "kubernetes",
                                                               "extra": {"kube_config_path": refusing_config}}))
    payload = _fired(_kubeflow_trigger(kubernetes_conn_id="kube_events", execution_deadline=time.time() - 1,
                                       resume_state={"framework": "pytorch"}))

    event = _read_back(payload)
    assert (event.kind, event.resume_state, event.started_at) == (EventKind.TIMEOUT, {"framework": "pytorch"}, 1.5)


# ---------------------------------------------------------------------------------------------- Ray


def _ray_trigger(**kwargs: Any) -> RayJobTrigger:
    return RayJobTrigger(job_name=JOB, ray_conn_id="ray_flaky", poll_interval=0.02,
                         resume_state={"framework": "pytorch"}, **kwargs)


def test_the_ray_triggers_events_are_read(port):  # noqa: F811 (the imported fixture)
    server = ThreadingHTTPServer(("127.0.0.1", port), JobsApi)
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    thread.start()
    try:
        payload = _fired(_ray_trigger(reconnect_budget=5.0))
    finally:
        server.shutdown()
        server.server_close()
    # The payload as the trigger wrote it before ``JobEvent``, key for key and in that order.
    assert json.dumps(payload) == json.dumps({"job_name": JOB, "resume_state": {"framework": "pytorch"},
                                              "status": "final", "state": "SUCCEEDED"})
    event = _read_back(payload)
    assert (event.kind, event.state, event.resume_state) == (EventKind.FINAL, "SUCCEEDED", {"framework": "pytorch"})

    payload = _fired(_ray_trigger(reconnect_budget=0.0))  # nothing listens any more
    assert list(payload) == ["job_name", "resume_state", "status", "message"]
    event = _read_back(payload)
    assert event.kind == EventKind.ERROR and "stayed unreachable" in (event.message or "")

    payload = _fired(_ray_trigger(reconnect_budget=5.0, execution_deadline=time.time() - 1))
    assert list(payload) == ["job_name", "resume_state", "status", "elapsed", "message"]
    assert payload["message"] == f"Ray job {JOB} reached the task's execution_timeout"
    event = _read_back(payload)
    assert event.kind == EventKind.TIMEOUT and event.elapsed is not None and event.namespace is None


def test_a_ray_event_with_no_resume_state_reads_as_one_without():
    """A Ray trigger of an earlier release wrote ``resume_state`` even when it was ``None``: read, it is a key the
    event lacks."""
    event = JobEvent.from_payload({"job_name": JOB, "resume_state": None, "status": "final", "state": "STOPPED"})
    assert event == JobEvent(EventKind.FINAL, JOB, state="STOPPED")

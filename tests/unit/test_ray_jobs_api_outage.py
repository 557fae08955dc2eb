"""A Ray Jobs API that drops or refuses connections: the wait (synchronous and in the trigger) retries within its
budget and takes none for a failure of the job; past the budget it gives up, saying the API stayed unreachable.

Real sockets on 127.0.0.1: a small HTTP server answering as the Jobs API does, which closes its first connections
without an answer; or nothing listening on the port (connections refused).
"""

from __future__ import annotations

import asyncio
import json
import socket
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from airflow_distributed.backends.base import DistributedJobError
from airflow_distributed.backends.ray_run import wait_for_job
from airflow_distributed.hooks.ray import RayJobHook
from airflow_distributed.triggers.ray import RayJobTrigger

JOB = "train-0123abcd"


def answer(handler: BaseHTTPRequestHandler, body: dict) -> None:
    """Answer as the Jobs API does: JSON."""
    data = json.dumps(body).encode()
    handler.send_response(200)
    handler.send_header("Content-Type", "application/json")
    handler.send_header("Content-Length", str(len(data)))
    handler.end_headers()
    handler.wfile.write(data)


class JobsApi(BaseHTTPRequestHandler):
    """``GET /api/jobs/<id>``: the job has succeeded; ``/logs``: an empty log."""

    requests: list[str] = []

    def do_GET(self) -> None:
        JobsApi.requests.append(self.path)
        answer(self, {"logs": ""} if self.path.endswith("/logs") else {"submission_id": JOB, "status": "SUCCEEDED"})

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
def port(monkeypatch) -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        free = probe.getsockname()[1]
    monkeypatch.setenv("AIRFLOW_CONN_RAY_FLAKY", json.dumps({"conn_type": "ray", "host": "127.0.0.1", "port": free}))
    JobsApi.requests = []
    return free


class DroppingServer(ThreadingHTTPServer):
    """Closes its first ``drop`` connections without an answer (a dropped connection), then answers."""

    def __init__(self, port: int, drop: int) -> None:
        super().__init__(("127.0.0.1", port), JobsApi)
        self.drop, self.dropped = drop, 0

    def verify_request(self, request: object, client_address: object) -> bool:
        if self.dropped < self.drop:
            self.dropped += 1
            return False
        return True


@pytest.fixture
def dropping_api(port) -> Iterator[DroppingServer]:
    server = DroppingServer(port, drop=3)
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    thread.start()
    yield server
    server.shutdown()
    server.server_close()


class Log:
    def __init__(self) -> None:
        self.warnings: list[str] = []

    def warning(self, message: str, *args: object) -> None:
        self.warnings.append(message % args)

    def info(self, *args: object) -> None:
        pass


def test_the_synchronous_wait_retries_dropped_connections_and_sees_the_job_end(dropping_api):
    log = Log()
    info = wait_for_job(RayJobHook("ray_flaky"), JOB, 0.05, log, reconnect_budget=60)

    assert info["status"] == "SUCCEEDED"
    assert dropping_api.dropped == 3
    assert log.warnings == ["the Ray Jobs API is unreachable (ConnectionError); trying again"] * 3
    assert f"/api/jobs/{JOB}" in JobsApi.requests


def test_the_synchronous_wait_gives_up_once_the_api_stays_unreachable_past_its_budget(port):
    # Nothing listens on the port: every connection is refused.
    with pytest.raises(DistributedJobError, match=r"stayed unreachable for 0.3s while job train-0123abcd ran"):
        wait_for_job(RayJobHook("ray_flaky"), JOB, 0.05, Log(), reconnect_budget=0.3)


def _first_event(trigger: RayJobTrigger) -> dict:
    async def first() -> dict:
        async for event in trigger.run():
            return event.payload
        raise AssertionError("no event")

    return asyncio.run(first())


def test_the_trigger_retries_dropped_connections_and_fires_when_the_job_ended(dropping_api):
    trigger = RayJobTrigger(job_name=JOB, ray_conn_id="ray_flaky", poll_interval=0.05, reconnect_budget=60,
                            resume_state={"framework": "pytorch"})
    event = _first_event(trigger)

    assert event == {"job_name": JOB, "resume_state": {"framework": "pytorch"}, "status": "final",
                     "state": "SUCCEEDED"}
    assert dropping_api.dropped == 3


def test_the_trigger_reports_an_error_once_the_api_stays_unreachable_past_its_budget(port):
    trigger = RayJobTrigger(job_name=JOB, ray_conn_id="ray_flaky", poll_interval=0.05, reconnect_budget=0.3)
    event = _first_event(trigger)

    assert event["status"] == "error"
    assert "stayed unreachable for 0.3s while job train-0123abcd ran" in event["message"]


def test_the_trigger_serializes_every_argument():
    trigger = RayJobTrigger(job_name=JOB, ray_conn_id="c", poll_interval=2.0, execution_deadline=5.0,
                            reconnect_budget=9.0, resume_state={"framework": "xgboost"})
    path, arguments = trigger.serialize()
    assert path == "airflow_distributed.triggers.ray.RayJobTrigger"
    assert RayJobTrigger(**arguments).serialize() == (path, arguments)


# --- One outage rule for both drivers: the same looks, the same verdict ----------------------------------------

DROP = "drop"


class ScriptedApi(BaseHTTPRequestHandler):
    """The Jobs API of one job, answering from a script: each ``GET /api/jobs/<id>`` takes the next of ``states``
    (a Ray state, or ``DROP``: the connection closed without an answer) and each liveness renewal (``PUT
    /api/packages/...``) the next of ``renewals`` (``"ok"`` or ``DROP``); a script's last entry answers from then
    on. The log is empty."""

    states: list[str] = []
    renewals: list[str] = []

    def _next(self, script: list[str]) -> str:
        return script.pop(0) if len(script) > 1 else script[0]

    def do_GET(self) -> None:
        if self.path.endswith("/logs"):
            return answer(self, {"logs": ""})
        state = self._next(ScriptedApi.states)
        if state == DROP:
            self.close_connection = True
            return None
        return answer(self, {"submission_id": JOB, "status": state})

    def do_PUT(self) -> None:
        self.rfile.read(int(self.headers.get("Content-Length") or 0))
        if self._next(ScriptedApi.renewals) == DROP:
            self.close_connection = True
            return None
        return answer(self, {"result": True, "msg": "", "data": {}})

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
def scripted_api(port) -> Iterator[type[ScriptedApi]]:
    server = ThreadingHTTPServer(("127.0.0.1", port), ScriptedApi)
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    thread.start()
    yield ScriptedApi
    server.shutdown()
    server.server_close()


#: Budget and pace of these waits: any two looks are further apart (the pause between them) than the budget, so a
#: second look in a row that finds the API unreachable is past it, whatever the machine's speed.
BUDGET, PAUSE = 0.01, 0.05


def _sync_verdict(api: type[ScriptedApi], states: list[str], renewals: list[str]) -> tuple[str, str]:
    api.states, api.renewals = list(states), list(renewals)
    try:
        info = wait_for_job(RayJobHook("ray_flaky"), JOB, PAUSE, Log(), reconnect_budget=BUDGET, renew_every=0.0)
    except DistributedJobError as error:
        return "error", "outage" if "stayed unreachable" in str(error) else str(error)
    return "final", info["status"]


def _trigger_verdict(api: type[ScriptedApi], states: list[str], renewals: list[str]) -> tuple[str, str]:
    api.states, api.renewals = list(states), list(renewals)
    event = _first_event(RayJobTrigger(job_name=JOB, ray_conn_id="ray_flaky", poll_interval=PAUSE,
                                       reconnect_budget=BUDGET, renew_every=0.0))
    if event["status"] == "final":
        return "final", event["state"]
    return event["status"], "outage" if "stayed unreachable" in event["message"] else event["message"]


@pytest.mark.parametrize(("states", "renewals", "verdict"), [
    # Every renewal finds the head unreachable while every read of the job is answered: past the budget, an outage.
    (["RUNNING"] * 3 + ["SUCCEEDED"], [DROP], ("error", "outage")),
    # The read finds it unreachable, then the next look's renewal: one outage, two requests, past the budget.
    ([DROP, "RUNNING", "RUNNING", "SUCCEEDED"], [DROP, "ok"], ("error", "outage")),
    # One failed renewal, then a look whose every request is answered: the outage is over, the job ends.
    (["RUNNING", "RUNNING", "SUCCEEDED"], [DROP, "ok"], ("final", "SUCCEEDED")),
    # One failed read, then answers: the same.
    ([DROP, "RUNNING", "SUCCEEDED"], ["ok"], ("final", "SUCCEEDED")),
])
def test_the_synchronous_wait_and_the_trigger_judge_the_same_looks_alike(scripted_api, states, renewals, verdict):
    assert _sync_verdict(scripted_api, states, renewals) == verdict
    assert _trigger_verdict(scripted_api, states, renewals) == verdict

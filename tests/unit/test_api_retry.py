"""``call_with_retries`` / ``acall_with_retries``: which failures are retried, how long each wait is, what is raised.

The sleeps are recorded, never slept; errors are the Kubernetes client's own ``ApiException``.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable
from typing import Any

import pytest
import urllib3.exceptions
from kubernetes.client import ApiException

from airflow_distributed.hooks.api_retry import RetryPolicy, acall_with_retries, call_with_retries, short_error

NO_JITTER = RetryPolicy(attempts=4, initial_delay=0.5, max_delay=15.0, jitter=0.0)


class Log:
    def __init__(self) -> None:
        self.warnings: list[str] = []

    def warning(self, msg: Any, *args: Any) -> None:
        self.warnings.append(msg % args)

    debug = info = error = exception = warning


def api_error(status: int, retry_after: str | None = None) -> ApiException:
    error = ApiException(status=status, reason="Reason")
    error.body = f'{{"kind": "Status", "reason": "R{status}", "message": "m{status}"}}'
    if retry_after is not None:
        error.headers = {"Retry-After": retry_after}
    return error


class Flaky:
    """Fails with ``errors`` in turn, then returns ``"done"``; counts its calls."""

    def __init__(self, *errors: BaseException) -> None:
        self.errors = list(errors)
        self.calls = 0

    def __call__(self) -> str:
        self.calls += 1
        if self.errors:
            raise self.errors.pop(0)
        return "done"


def run(call: Callable[[], str], policy: RetryPolicy = NO_JITTER) -> tuple[str, list[float], Log]:
    waits: list[float] = []
    log = Log()
    return call_with_retries(call, what="reading pod ns/p", policy=policy, sleep=waits.append, log=log), waits, log


@pytest.mark.parametrize("status", [429, 500, 502, 503, 504])
def test_transient_statuses_are_retried_with_exponential_backoff(status):
    call = Flaky(api_error(status), api_error(status), api_error(status))
    result, waits, log = run(call)
    assert result == "done"
    assert call.calls == 4
    assert waits == [0.5, 1.0, 2.0]
    assert log.warnings == [
        f"reading pod ns/p: {status} R{status}: m{status}; retrying in 0.5s (try 2 of 4)",
        f"reading pod ns/p: {status} R{status}: m{status}; retrying in 1.0s (try 3 of 4)",
        f"reading pod ns/p: {status} R{status}: m{status}; retrying in 2.0s (try 4 of 4)",
    ]


def test_connection_errors_are_retried():
    reset = urllib3.exceptions.ProtocolError("Connection broken", ConnectionResetError(104, "reset"))
    call = Flaky(reset, ConnectionRefusedError(111, "refused"))
    result, waits, _ = run(call)
    assert (result, call.calls, waits) == ("done", 3, [0.5, 1.0])


@pytest.mark.parametrize("error", [api_error(400), api_error(403), api_error(404), api_error(409),
                                   ValueError("not an API error")])
def test_other_failures_are_raised_at_once_as_they_came(error):
    call = Flaky(error)
    with pytest.raises(type(error)) as raised:
        run(call)
    assert raised.value is error
    assert call.calls == 1


def test_after_the_last_try_the_last_failure_is_raised_as_it_came():
    errors = [api_error(503) for _ in range(4)]
    call = Flaky(*errors, api_error(503))
    waits: list[float] = []
    with pytest.raises(ApiException) as raised:
        call_with_retries(call, what="x", policy=NO_JITTER, sleep=waits.append, log=Log())
    assert raised.value is errors[-1]  # not a tenacity RetryError, not the first failure
    assert call.calls == 4
    assert waits == [0.5, 1.0, 2.0]


def test_one_attempt_means_no_retry():
    call = Flaky(api_error(503))
    waits: list[float] = []
    with pytest.raises(ApiException):
        call_with_retries(call, what="x", policy=RetryPolicy(attempts=1), sleep=waits.append, log=Log())
    assert (call.calls, waits) == (1, [])


def test_retry_after_is_honoured_and_capped_at_max_delay():
    policy = RetryPolicy(attempts=4, initial_delay=0.5, max_delay=10.0, jitter=0.0)
    call = Flaky(api_error(429, "7"), api_error(503, "60"), api_error(429, "soon"))
    result, waits, log = run(call, policy)
    # 7 as asked; 60 capped at max_delay; an unreadable Retry-After falls back to the backoff of the third try.
    assert (result, waits) == ("done", [7.0, 10.0, 2.0])
    assert log.warnings[0] == "reading pod ns/p: 429 R429: m429; retrying in 7.0s (try 2 of 4)"


def test_backoff_is_capped_and_jittered_within_its_fraction():
    policy = RetryPolicy(attempts=8, initial_delay=1.0, max_delay=4.0, jitter=0.25)
    call = Flaky(*(api_error(500) for _ in range(7)))
    result, waits, _ = run(call, policy)
    assert result == "done"
    bases = [1.0, 2.0, 4.0, 4.0, 4.0, 4.0, 4.0]
    assert len(waits) == len(bases)
    for wait, base in zip(waits, bases, strict=True):
        assert base * 0.75 <= wait <= base


def test_the_async_twin_follows_the_same_rules():
    waits: list[float] = []

    async def sleep(seconds: float) -> None:
        waits.append(seconds)

    failures = [api_error(503, "3"), api_error(502)]
    calls = []

    async def call() -> str:
        calls.append(1)
        if failures:
            raise failures.pop(0)
        return "done"

    log = Log()
    result = asyncio.run(acall_with_retries(call, what="deleting job ns/j", policy=NO_JITTER, log=log, sleep=sleep))
    assert (result, len(calls), waits) == ("done", 3, [3.0, 1.0])
    assert log.warnings[1] == "deleting job ns/j: 502 R502: m502; retrying in 1.0s (try 3 of 4)"

    last = api_error(504)
    exhausted = [api_error(504), api_error(504), api_error(504), last]

    async def failing() -> str:
        raise exhausted.pop(0)

    with pytest.raises(ApiException) as raised:
        asyncio.run(acall_with_retries(failing, what="x", policy=NO_JITTER, log=Log(), sleep=sleep))
    assert raised.value is last

    forbidden = api_error(403)

    async def refused() -> str:
        raise forbidden

    waits.clear()
    with pytest.raises(ApiException) as raised:
        asyncio.run(acall_with_retries(refused, what="x", policy=NO_JITTER, log=Log(), sleep=sleep))
    assert (raised.value, waits) == (forbidden, [])


def test_policy_delay_keeps_its_meaning_for_the_watch_loop():
    assert NO_JITTER.delay(0, api_error(404)) is None
    assert NO_JITTER.delay(0, api_error(503)) == 0.5
    assert NO_JITTER.delay(1, api_error(429, "9")) == 9.0
    assert NO_JITTER.delay(3, api_error(503)) is None  # past the last try
    assert NO_JITTER.backoff(2) == 2.0
    assert NO_JITTER.backoff(3) is None


def test_a_refused_exec_is_said_as_the_refusal_not_as_the_clients_error_on_its_missing_body():
    # The exceptions as the real client raises them (kubernetes.stream.ws_client.websocket_call, then
    # kubernetes.client.ApiClient.__call_api decoding the body the first has not): the refusal is only their context.
    from websocket import WebSocketBadStatusException

    status = {"kind": "Status", "apiVersion": "v1", "status": "Failure", "reason": "Forbidden", "code": 403,
              "message": 'pods "p" is forbidden: User "system:serviceaccount:ml:task" cannot get resource '
                         '"pods/exec" in API group "" in the namespace "ml"'}
    try:
        try:
            try:
                raise WebSocketBadStatusException("Handshake status 403 Forbidden -+-+- {} -+-+- ...", 403,
                                                  "Forbidden", {}, json.dumps(status).encode())
            except Exception as refused:
                raise ApiException(status=0, reason=str(refused))  # noqa: B904 (as the client does: no body, no cause)
        except ApiException as error:
            error.body.decode("utf-8")
    except AttributeError as error:
        seen = error
    assert short_error(seen) == f"403 Forbidden: {status['message']}"


def test_a_trigger_s_refused_request_ends_as_the_error_its_status_names():
    """A trigger's own requests (a LIST of the job's pods, its delete on kill) end as the task's requests do: a 403
    is a ``ClusterRefusedError`` naming what was asked (the event names the class, and the retry policy does not
    retry it), a 503 past its retries an ``ApiUnavailableError``; the retried 503 was tried again first."""
    from kubernetes_asyncio.client.exceptions import ApiException as AsyncApiException

    from airflow_distributed.exceptions import ApiUnavailableError, ClusterRefusedError
    from airflow_distributed.triggers.kubeflow import KubeflowJobTrigger

    trigger = KubeflowJobTrigger(job_name="j1", namespace="ns", group="kubeflow.org", version="v1",
                                 plural="pytorchjobs")
    trigger.retry = RetryPolicy(attempts=2, initial_delay=0.0, max_delay=0.0, jitter=0.0)
    calls: list[int] = []

    def failing(status: int) -> Callable[[], Any]:
        async def call() -> None:
            calls.append(status)
            error = AsyncApiException(status=status, reason="Reason")
            error.body = json.dumps({"kind": "Status", "reason": "Forbidden" if status == 403 else "Unavailable",
                                     "message": f'pods is forbidden: cannot list resource "pods" ({status})'}).encode()
            raise error
        return call

    with pytest.raises(ClusterRefusedError, match=r"^listing the pods of .*: 403 Forbidden: pods is") as refused:
        asyncio.run(trigger._call(failing(403), "listing the pods of PyTorchJob ns/j1"))
    assert refused.value.status == 403 and calls == [403]
    with pytest.raises(ApiUnavailableError, match=r"^deleting PyTorchJob ns/j1: 503 Unavailable"):
        asyncio.run(trigger._call(failing(503), "deleting PyTorchJob ns/j1"))
    assert calls == [403, 503, 503]

"""``WatchPolicy``: what the end of a watch or a failed request means for a wait (pure, no network); and what the
drivers (``run_watch``, ``arun_watch``) keep while a watch is open."""

from __future__ import annotations

import asyncio
import gc
import logging
import weakref

import pytest
import urllib3.exceptions
from kubernetes.client import ApiException

from airflow_distributed.hooks.api_retry import KubernetesJobError, RetryPolicy
from airflow_distributed.hooks.watch_loop import (
    AsyncWatchCalls,
    Step,
    WatchCalls,
    WatchPolicy,
    arun_watch,
    run_watch,
)
from airflow_distributed.jobstate.watch_stream import ResumableWatch, WatchError, WatchGone
from airflow_distributed.jobstate.watch_timings import WatchTimings


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def policy(clock: Clock | None = None, rand: float = 0.5, **timings) -> WatchPolicy:
    return WatchPolicy("watching the pods of job ns/job", WatchTimings(**timings),
                       RetryPolicy(attempts=3, initial_delay=1.0, jitter=0.0), clock=clock or Clock(),
                       rand=lambda: rand)


def api_error(status: int) -> ApiException:
    return ApiException(status=status, reason="Reason")


READ_TIMEOUT = urllib3.exceptions.ReadTimeoutError(None, "/", "Read timed out.")
RESET = urllib3.exceptions.ProtocolError("Connection broken", ConnectionResetError(104, "reset"))


def test_quiet_ends_resume_and_are_never_failures():
    p = policy()
    for _ in range(100):  # far past any retry budget
        assert p.watch_ended(None, lines=0) == Step()
        assert p.watch_ended(READ_TIMEOUT, lines=0) == Step()
        assert p.watch_ended(RESET, lines=3).delay <= 1.0
    assert p.api_failures == 0 and p.quiet_ends == 300


def test_drops_in_a_row_are_spread_with_jitter_up_to_the_longest_wait():
    p = policy(rand=1.0, reconnect_delay=1.0, max_reconnect_delay=8.0)
    assert [p.watch_ended(RESET, lines=0).delay for _ in range(6)] == [1.0, 2.0, 4.0, 8.0, 8.0, 8.0]
    assert p.watch_ended(RESET, lines=1).delay == 1.0  # a stream that carried something was healthy
    assert policy(rand=0.0).watch_ended(RESET, lines=0).delay == 0.0  # full jitter: anywhere from 0
    assert policy(rand=0.0, jitter=0.5).watch_ended(RESET, lines=0).delay == 0.5


def test_gone_relists_at_once():
    assert policy().request_failed(WatchGone("expired")) == Step(relist=True)
    assert policy().request_failed(api_error(410)) == Step(relist=True)


@pytest.mark.parametrize("status", [401, 403])
def test_credentials_refused_end_the_wait_at_once(status):
    with pytest.raises(KubernetesJobError, match=rf"^watching the pods of job ns/job: {status} Reason.*not retried"):
        policy().request_failed(api_error(status))


def test_server_errors_are_retried_then_end_the_wait_and_an_answer_resets_the_count():
    p = policy()
    assert p.request_failed(api_error(503)) == Step(1.0, retry=True)
    assert p.request_failed(api_error(500)) == Step(2.0, retry=True)
    p.answered()
    assert p.request_failed(api_error(429)) == Step(1.0, retry=True)
    assert p.request_failed(WatchError("500 InternalError: boom")) == Step(2.0, relist=True, retry=True)
    with pytest.raises(KubernetesJobError, match="gave up after 3 failed requests in a row"):
        p.request_failed(api_error(502))
    with pytest.raises(KubernetesJobError, match="404"):
        policy().request_failed(api_error(404))


def test_an_unreachable_server_is_retried_within_the_reconnect_budget_then_ends_the_wait():
    clock = Clock()
    p = policy(clock, rand=1.0, reconnect_budget=10.0, reconnect_delay=1.0, max_reconnect_delay=4.0)
    refused = urllib3.exceptions.NewConnectionError(None, "Connection refused")
    delays = []
    with pytest.raises(KubernetesJobError, match=r"could not be reached again for 10s \(reconnect_budget 10s\)"):
        while True:
            step = p.request_failed(refused)
            delays.append(step.delay)
            clock.now += step.delay
    assert delays == [1.0, 2.0, 4.0, 3.0]  # the last one cut to the end of the budget
    assert p.api_failures == 0  # connection trouble is not counted against the retry policy


def test_timings_are_checked_and_name_the_field():
    with pytest.raises(ValueError, match="server_timeout"):
        WatchTimings.of({"server_timeout": 0})
    with pytest.raises(ValueError, match=r"unknown key\(s\) 'read_timeout'; allowed: .*read_timeout_margin"):
        WatchTimings.of({"read_timeout": 3})
    timings = WatchTimings.of({"server_timeout": 2, "read_timeout_margin": 0.5}, server_timeout=7)
    assert timings.request_timeout(7) == (10.0, 7.5)
    assert WatchTimings.of(timings.as_dict()) == timings


def test_bad_watch_timings_fail_at_parse_time_naming_the_argument():
    from airflow_distributed.operators import DistributedTrainingOperator
    from airflow_distributed.sensors import PytorchJobSensor
    from airflow_distributed.spec.errors import SpecValidationError

    with pytest.raises(SpecValidationError, match=r"watch_timings.*jitter: 2 must be between 0 and 1"):
        DistributedTrainingOperator(task_id="t", framework="pytorch", environment={"pytorch": {"n_workers": 1}},
                                    command=["python", "train.py"], image="i", backend="kubernetes",
                                    watch_timings={"jitter": 2})
    with pytest.raises(ValueError, match=r"PytorchJobSensor: watch_timings: unknown key\(s\) 'budget'"):
        PytorchJobSensor(task_id="s", job_name="j", watch_timings={"budget": 1})



# ------------------------------------------------------------------------------------------ the drivers' memory


class Body(dict):
    """A LIST's parsed body that a weak reference can follow."""


class EndedStream:
    """A watch answer that ends at once, for either driver (urllib3's ``stream``, aiohttp's ``content``)."""

    def __init__(self) -> None:
        self.content = self

    def stream(self, *args, **kwargs):
        return iter(())

    async def iter_any(self):
        for chunk in ():
            yield chunk

    def close(self) -> None:
        pass

    def release_conn(self) -> None:
        pass


class OneList:
    """One LIST, then watches: whether the LIST's body was still alive (after a collection) as each watch opened.

    A waiter holds its watch open for minutes, and a triggerer one per namespace: a body kept meanwhile (a local
    variable of the driver) held every listed pod whole, 79 MB for the 2000 pods of 1000 jobs on a real server."""

    def __init__(self) -> None:
        self.watch = ResumableWatch()
        self.body: weakref.ref | None = None
        self.alive: list[bool] = []

    def list_(self) -> Body:
        body = Body(metadata={"resourceVersion": "7"}, items=[{"metadata": {"name": "p"}}])
        self.body = weakref.ref(body)
        return body

    def open_watch(self, version, seconds, timeout) -> EndedStream:
        gc.collect()
        assert self.body is not None
        self.alive.append(self.body() is not None)
        return EndedStream()

    def kwargs(self) -> dict:
        return {"on_list": self.watch._list_version, "on_line": lambda line: None,
                "done": lambda: len(self.alive) >= 2}


def test_the_sync_driver_keeps_no_listed_body_while_it_watches():
    one = OneList()
    run_watch(one.watch, WatchCalls(list_=one.list_, open_watch=one.open_watch, **one.kwargs()), policy(),
              sleep=lambda seconds: None, log=logging.getLogger("test"))
    assert one.alive == [False, False]


def test_the_async_driver_keeps_no_listed_body_while_it_watches():
    one = OneList()

    async def list_() -> Body:
        return one.list_()

    async def open_watch(*args) -> EndedStream:
        return one.open_watch(*args)

    async def no_sleep(seconds: float) -> None:
        pass

    asyncio.run(arun_watch(one.watch, AsyncWatchCalls(list_=list_, open_watch=open_watch, **one.kwargs()), policy(),
                           sleep=no_sleep, log=logging.getLogger("test")))
    assert one.alive == [False, False]

"""The one list -> watch -> resume loop of every waiter (operator, trigger, Kubeflow, sensors), sync and async.

A wait is a LIST, then watch requests resumed from the last resourceVersion or bookmark (``ResumableWatch``),
listed again only after 410 Gone. What differs between waiters is small (how to list, how to open a watch,
what a line means, when to stop); what they share is here:

- ``WatchTimings`` (pure, in ``jobstate.watch_timings``): the server-side ``timeoutSeconds`` of each watch, the
  client's connect and read timeouts (the read timeout above ``timeoutSeconds``, so that a quiet watch is ended by
  the server, not the client), how long a broken connection may take to come back, and the jitter of reconnects;
- ``WatchPolicy`` (pure): what the end of a watch or the failure of a request means, and how long to wait;
- ``run_watch`` / ``arun_watch``: the sync and async drivers.

Quiet hours are normal: a watch that ends without an event (server timeout, client read timeout, connection
closed or reset mid-stream) is resumed and is never an API failure. Only real errors end a wait: 401/403 at
once, 429/5xx after the retry policy's attempts, another 4xx at once, and a connection that cannot be opened
again within ``reconnect_budget``.

Only waits import this module (it loads both Kubernetes clients' modules); the operator and the sensors check
``watch_timings`` at parse time with the pure ``jobstate.watch_timings.WatchTimings``.
"""

from __future__ import annotations

import asyncio
import random
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import Any

import aiohttp
import urllib3.exceptions
from kubernetes.watch.watch import iter_resp_lines

from airflow_distributed.exceptions import ApiUnavailableError, ClusterRefusedError, api_error_class
from airflow_distributed.hooks.api_retry import (
    TRANSIENT_STATUSES,
    RetryPolicy,
    api_status,
    is_connection_error,
    short_error,
)
from airflow_distributed.jobstate.watch_stream import ResumableWatch, WatchError, WatchGone
from airflow_distributed.jobstate.watch_timings import WatchTimings
from airflow_distributed.logs import TaskLog

#: Refused for good: the credentials or their permissions (retrying does not change them).
AUTH_STATUSES = frozenset({401, 403})

# ------------------------------------------------------------------------------------------ the policy (pure)


@dataclass(frozen=True)
class Step:
    """What to do after a request or a watch ended: wait ``delay`` seconds, then list again or resume.

    ``retry``: after a failed request (the wait is a retry's, even of 0 s: a ``Retry-After: 0``).
    """

    delay: float = 0.0
    relist: bool = False
    retry: bool = False


def is_read_timeout(error: BaseException) -> bool:
    """The server sent nothing for the client's whole read timeout (urllib3 or aiohttp)."""
    return isinstance(error, (urllib3.exceptions.ReadTimeoutError, aiohttp.ServerTimeoutError))


class WatchPolicy:
    """What the end of a watch or the failure of a request means for a wait, and how long to wait (pure).

    Two budgets, reset by any answer of the server: ``retry.attempts`` API failures in a row (429/5xx, an
    ERROR event in a stream), and ``timings.reconnect_budget`` seconds of broken connections. A watch that
    ends quietly spends neither.

    :param what: what is waited for, e.g. ``watching the pods of job ns/name`` (messages start with it).
    :param clock: monotonic seconds (the reconnect budget).
    :param rand: a number in [0, 1) (reconnect jitter).
    """

    def __init__(self, what: str, timings: WatchTimings | None = None, retry: RetryPolicy | None = None, *,
                 clock: Callable[[], float] = time.monotonic, rand: Callable[[], float] = random.random) -> None:
        self.what = what
        self.timings = timings or WatchTimings()
        self.retry = retry or RetryPolicy()
        self._clock, self._rand = clock, rand
        self.api_failures = 0
        self.broken_since: float | None = None
        self.drops = 0
        #: Watches ended quietly, for logs and tests.
        self.quiet_ends = 0

    def answered(self) -> None:
        """The server answered a request (a LIST's body, a watch's 200): the connection is healthy again."""
        self.api_failures = 0
        self.broken_since = None

    def watch_ended(self, error: BaseException | None, lines: int) -> Step:
        """A watch stream ended: ``error`` is what its reading raised (``None``: the server ended it).

        Quiet ends resume from the last resourceVersion at once, or after a jittered wait for a dropped
        connection; an ERROR event or anything but a connection problem goes to ``request_failed``.
        """
        if error is None or is_read_timeout(error):
            self.quiet_ends += 1
            self.drops = 0
            return Step()
        if isinstance(error, (WatchGone, WatchError)) or not is_connection_error(error):
            return self.request_failed(error)
        self.quiet_ends += 1
        # A stream that carried something was a healthy watch: its drop starts the spreading afresh.
        self.drops = 1 if lines else self.drops + 1
        return Step(self._reconnect_delay(self.drops - 1))

    def request_failed(self, error: BaseException) -> Step:
        """A LIST or the opening of a watch failed (or an ERROR event came): the next step, or raise.

        :raises KubernetesJobError: the wait cannot go on; the message says why.
        """
        if isinstance(error, WatchGone):
            return Step(relist=True)
        status = api_status(error)
        if status == 410:
            return Step(relist=True)
        if status in AUTH_STATUSES:
            raise ClusterRefusedError(f"{self.what}: {short_error(error)} (the API server refused the credentials "
                                      f"or their permissions; not retried)", status) from error
        if status is not None or isinstance(error, WatchError):
            if isinstance(error, WatchError) or status in TRANSIENT_STATUSES:
                # An ERROR event has no status of its own to judge: the plain backoff.
                delay = self.retry.backoff(self.api_failures) if status is None else self.retry.delay(
                    self.api_failures, error)
                self.api_failures += 1
                if delay is None:
                    raise ApiUnavailableError(f"{self.what}: {short_error(error)} (gave up after "
                                              f"{self.api_failures} failed requests in a row)", status) from error
                return Step(delay, relist=isinstance(error, WatchError), retry=True)
            raise api_error_class(status)(f"{self.what}: {short_error(error)}", status) from error
        if not is_connection_error(error):
            raise error
        now = self._clock()
        if self.broken_since is None:
            self.broken_since = now
            self.drops = 0
        elapsed = now - self.broken_since
        if elapsed >= self.timings.reconnect_budget:
            raise ApiUnavailableError(f"{self.what}: the API server could not be reached again for {elapsed:.0f}s "
                                      f"(reconnect_budget {self.timings.reconnect_budget:g}s): "
                                      f"{short_error(error)}") from error
        self.drops += 1
        delay = self._reconnect_delay(self.drops - 1)
        return Step(min(delay, max(0.0, self.broken_since + self.timings.reconnect_budget - now)), retry=True)

    def _reconnect_delay(self, attempt: int) -> float:
        t = self.timings
        full = min(t.max_reconnect_delay, t.reconnect_delay * (2 ** min(attempt, 30)))
        return full * (1 - t.jitter + t.jitter * self._rand())


# ------------------------------------------------------------------------------------------ the drivers


@dataclass
class WatchCalls:
    """What one waiter does; the driver does the rest.

    :param list_: one LIST request -> its body (``items``, ``metadata.resourceVersion``).
    :param open_watch: ``(resource_version, timeout_seconds, request_timeout)`` -> an open streamed response
        (``_preload_content=False``); a non-2xx answer raises the client's ``ApiException``.
    :param on_list: a LIST's body, handed to the ``ResumableWatch``.
    :param on_line: one line of the stream (a ``WatchGone`` / ``WatchError`` raised here is judged as usual).
    :param done: true when the wait is over (verdict, stop, deadline); asked after every list, line and watch.
    :param watch_seconds: ``timeoutSeconds`` of the next watch (``timings.server_timeout``, or less before a
        deadline).
    :param check: a request made between two watches when ``check_due()`` says so (a paced LIST of something
        the watched object does not show); it fails as a LIST does, and ``done`` is asked after it.
    :param check_due: whether ``check`` is to be made before the next watch; asked after each event too, a
        watch being ended early when it turns true.
    """

    list_: Callable[[], Any]
    open_watch: Callable[[str | None, int, tuple[float, float]], Any]
    on_list: Callable[[Mapping[str, Any]], Any]
    on_line: Callable[[str | bytes], Any]
    done: Callable[[], bool]
    watch_seconds: Callable[[], int] | None = None
    check: Callable[[], Any] | None = None
    check_due: Callable[[], bool] | None = None


class _Loop:
    """The decisions of a wait between its requests, shared by the sync and async drivers (which do the I/O).

    ``next_request()`` says what to send (``LIST``, ``CHECK``, or the ``timeoutSeconds`` of a watch; ``None``: the
    wait is over); the other methods take what came back and return how long to wait before the next request
    (``None``: no wait).
    """

    LIST = -1
    CHECK = -2

    def __init__(self, watch: ResumableWatch, calls: WatchCalls | AsyncWatchCalls, policy: WatchPolicy,
                 log: TaskLog) -> None:
        self.watch, self.calls, self.policy, self.log = watch, calls, policy, log

    def next_request(self) -> int | None:
        if self.calls.done():
            return None
        if self.watch.needs_list:
            return self.LIST
        if self.check_due():
            return self.CHECK
        timings = self.policy.timings
        seconds = self.calls.watch_seconds() if self.calls.watch_seconds is not None else timings.server_timeout
        return max(1, min(int(seconds), timings.server_timeout))

    def request_timeout(self, seconds: int) -> tuple[float, float]:
        return self.policy.timings.request_timeout(seconds)

    def listed(self, body: Mapping[str, Any]) -> float | None:
        self.policy.answered()
        try:
            self.calls.on_list(body)
        except Exception as error:
            return self.failed(error)
        return None

    def answered(self) -> None:
        self.policy.answered()

    def failed(self, error: BaseException) -> float | None:
        """A LIST or the opening of a watch failed."""
        return self._then(self.policy.request_failed(error), error, quiet=False)

    def check_due(self) -> bool:
        """Whether the check is to be made now. Also asked after each line of a watch: an event can make it due (a
        suspended job resumed), and the watch is then ended rather than the check put off until its timeout."""
        return self.calls.check is not None and self.calls.check_due is not None and self.calls.check_due()

    def line(self, line: str | bytes) -> bool:
        """One line of the stream; returns whether the wait is over."""
        self.calls.on_line(line)
        return self.calls.done()

    def stream_ended(self, error: BaseException | None, lines: int) -> float | None:
        step = self.policy.watch_ended(error, lines)
        quiet = not step.relist and not isinstance(error, (WatchGone, WatchError))
        return self._then(step, error, quiet=quiet)

    def _then(self, step: Step, error: BaseException | None, quiet: bool) -> float | None:
        what = self.policy.what
        if isinstance(error, WatchGone) or (error is not None and api_status(error) == 410):
            self.log.info("%s: the watch expired (410 Gone); listing again", what)
        elif quiet:
            if error is not None:
                self.log.info("%s: the watch ended (%s); resuming in %.1fs", what, short_error(error), step.delay)
        elif error is not None:
            self.log.warning("%s: %s; retrying in %.1fs", what, short_error(error), step.delay)
        if step.relist:
            self.watch.on_gone()
        if (step.delay > 0 or step.retry) and not self.calls.done():
            return step.delay
        return None


def run_watch(watch: ResumableWatch, calls: WatchCalls, policy: WatchPolicy, *,
              sleep: Callable[[float], None] = time.sleep, log: TaskLog) -> None:
    """Until ``calls.done()``: LIST, then watches resumed from the last resourceVersion (sync clients).

    Not a tenacity loop: quiet ends resume for ever, failures count against two budgets reset by any answer, and
    410 Gone relists; ``WatchPolicy`` takes its waits from the same ``RetryPolicy``.

    :raises KubernetesJobError: a real error (see ``WatchPolicy``).
    """
    loop = _Loop(watch, calls, policy, log)
    while (request := loop.next_request()) is not None:
        if request == loop.LIST:
            try:
                body = calls.list_()
            except Exception as error:
                delay = loop.failed(error)
            else:
                delay = loop.listed(body)
                # Not kept while the next watch is open (minutes): a LIST is every object whole, and a triggerer
                # has a watch per namespace.
                del body
        elif request == loop.CHECK:
            assert calls.check is not None
            try:
                calls.check()
            except Exception as error:
                delay = loop.failed(error)
            else:
                loop.answered()
                delay = None
        else:
            try:
                response = calls.open_watch(watch.resource_version, request, loop.request_timeout(request))
            except Exception as error:
                delay = loop.failed(error)
            else:
                loop.answered()
                count, ended = 0, None
                try:
                    for line in iter_resp_lines(response):
                        count += 1
                        if loop.line(line):
                            return
                        if loop.check_due():
                            break
                except Exception as error:
                    ended = error
                finally:
                    response.close()
                    response.release_conn()
                delay = loop.stream_ended(ended, count)
        if delay is not None:
            sleep(delay)


@dataclass
class AsyncWatchCalls:
    """``WatchCalls`` of an async waiter: ``list_`` and ``open_watch`` are coroutines (aiohttp responses)."""

    list_: Callable[[], Awaitable[Any]]
    open_watch: Callable[[str | None, int, tuple[float, float]], Awaitable[Any]]
    on_list: Callable[[Mapping[str, Any]], Any]
    on_line: Callable[[str | bytes], Any]
    done: Callable[[], bool]
    watch_seconds: Callable[[], int] | None = None
    check: Callable[[], Awaitable[Any]] | None = None
    check_due: Callable[[], bool] | None = None


async def arun_watch(watch: ResumableWatch, calls: AsyncWatchCalls, policy: WatchPolicy, *,
                     sleep: Callable[[float], Awaitable[Any]] | None = None, log: TaskLog) -> None:
    """The async twin of ``run_watch`` (``kubernetes_asyncio``)."""
    sleep = sleep or asyncio.sleep
    loop = _Loop(watch, calls, policy, log)
    while (request := loop.next_request()) is not None:
        if request == loop.LIST:
            try:
                body = await calls.list_()
            except Exception as error:
                delay = loop.failed(error)
            else:
                delay = loop.listed(body)
                del body  # as in run_watch
        elif request == loop.CHECK:
            assert calls.check is not None
            try:
                await calls.check()
            except Exception as error:
                delay = loop.failed(error)
            else:
                loop.answered()
                delay = None
        else:
            try:
                response = await calls.open_watch(watch.resource_version, request, loop.request_timeout(request))
            except Exception as error:
                delay = loop.failed(error)
            else:
                loop.answered()
                count, ended = 0, None
                try:
                    async for line in lines(response):
                        count += 1
                        if loop.line(line):
                            return
                        if loop.check_due():
                            break
                except Exception as error:
                    ended = error
                finally:
                    response.close()
                delay = loop.stream_ended(ended, count)
        if delay is not None:
            await sleep(delay)


async def lines(response: Any) -> AsyncIterator[bytes]:
    """Lines of a streamed body of any length (aiohttp's ``readline`` refuses lines over 64 KiB, and a pod of a
    big job is bigger: every replica's address is in its environment)."""
    buffer = bytearray()
    async for chunk in response.content.iter_any():
        buffer.extend(chunk)
        start = 0
        while (end := buffer.find(b"\n", start)) != -1:
            yield bytes(buffer[start:end])
            start = end + 1
        del buffer[:start]
    if buffer:
        yield bytes(buffer)


__all__ = [
    "AUTH_STATUSES",
    "AsyncWatchCalls",
    "Step",
    "WatchCalls",
    "WatchPolicy",
    "arun_watch",
    "is_read_timeout",
    "lines",
    "run_watch",
]

"""Which Kubernetes API failures are worth retrying, how long to wait, and short messages for the rest.

Shared by the sync hooks and the async triggers. Nothing here talks to the network: the retry loops (tenacity's
``Retrying``/``AsyncRetrying`` driven by a ``RetryPolicy``) take the call, the sleep and the logger as arguments, so
a test of a retry path does not wait. Only waits and calls to a cluster import it (it loads both clients'
exception modules, ``urllib3`` and ``aiohttp``); DAG parsing does not.
"""

from __future__ import annotations

import asyncio
import json
import random
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any, TypeVar

import aiohttp
import urllib3.exceptions
from tenacity import AsyncRetrying, RetryCallState, Retrying, retry_if_exception, stop_after_attempt

from airflow_distributed.exceptions import KubernetesJobError, api_error_class
from airflow_distributed.logs import TaskLog

T = TypeVar("T")

#: Rate limiting and server-side trouble: the same request may succeed a moment later.
TRANSIENT_STATUSES = frozenset({429, 500, 502, 503, 504})


def api_status(error: BaseException) -> int | None:
    """The HTTP status of a ``kubernetes`` or ``kubernetes_asyncio`` ``ApiException``, else ``None``."""
    status = getattr(error, "status", None)
    # Both clients' ApiException carry ``status``/``reason``/``body``; checking the shape keeps this module free
    # of both imports (the async client is only needed in the triggerer).
    if isinstance(status, int) and hasattr(error, "reason") and hasattr(error, "body"):
        return status
    return None


def is_connection_error(error: BaseException) -> bool:
    """A request that never got an answer: refused, reset, timed out (urllib3 or aiohttp)."""
    return isinstance(error, (urllib3.exceptions.HTTPError, ConnectionError, TimeoutError, asyncio.TimeoutError,
                              aiohttp.ClientConnectionError, aiohttp.ClientPayloadError))


def is_transient(error: BaseException) -> bool:
    status = api_status(error)
    if status is not None:
        return status in TRANSIENT_STATUSES
    return is_connection_error(error)


def retry_after(error: BaseException) -> float | None:
    """Seconds the server asked us to wait (``Retry-After`` on 429/503), if it said."""
    headers = getattr(error, "headers", None) or {}
    try:
        value = headers.get("Retry-After") if hasattr(headers, "get") else None
        return None if value is None else max(0.0, float(value))
    except (TypeError, ValueError):
        return None


@dataclass(frozen=True)
class RetryPolicy:
    """Exponential backoff with jitter for transient failures only.

    :param attempts: tries in all, the first one included.
    :param initial_delay: wait before the second try, in seconds.
    :param max_delay: the longest wait between two tries.
    :param jitter: fraction of each wait that is random, so that many waiters do not retry in step.
    """

    attempts: int = 6
    initial_delay: float = 0.5
    max_delay: float = 15.0
    jitter: float = 0.2

    def delay(self, attempt: int, error: BaseException) -> float | None:
        """Seconds to wait after try number ``attempt`` (0-based) failed with ``error``; ``None``: give up."""
        if not is_transient(error) or attempt + 1 >= self.attempts:
            return None
        return self.wait(attempt, error)

    def wait(self, attempt: int, error: BaseException | None) -> float:
        """The wait after failed try number ``attempt`` (0-based), were there another: the server's
        ``Retry-After`` (at most ``max_delay``) if it said, else the backoff."""
        asked = None if error is None else retry_after(error)
        if asked is not None:
            return min(asked, self.max_delay)
        base = min(self.max_delay, self.initial_delay * (2**attempt))
        return base * (1 - self.jitter + self.jitter * random.random())

    def backoff(self, attempt: int) -> float | None:
        """The wait after failed try number ``attempt`` (0-based) whatever the error; ``None`` past the last."""
        if attempt + 1 >= self.attempts:
            return None
        return self.wait(attempt, None)

    def retrying(self, what: str, log: TaskLog) -> dict[str, Any]:
        """tenacity's arguments for this policy: transient failures only, ``attempts`` tries, the policy's waits,
        a warning before each, and the last failure raised as it came (``reraise``), not as a ``RetryError``."""

        def failure(state: RetryCallState) -> BaseException | None:
            return None if state.outcome is None else state.outcome.exception()

        def announce(state: RetryCallState) -> None:
            error = failure(state)
            wait = state.next_action.sleep if state.next_action is not None else 0.0
            log.warning("%s: %s; retrying in %.1fs (try %d of %d)", what,
                        short_error(error) if error is not None else "failed", wait, state.attempt_number + 1,
                        self.attempts)

        return {
            "retry": retry_if_exception(is_transient),
            "stop": stop_after_attempt(self.attempts),
            "wait": lambda state: self.wait(state.attempt_number - 1, failure(state)),
            "before_sleep": announce,
            "reraise": True,
        }


def call_with_retries(
    call: Callable[[], T],
    *,
    what: str,
    policy: RetryPolicy,
    sleep: Callable[[float], None],
    log: TaskLog,
) -> T:
    """``call()``, retried after transient failures; the last failure is raised as it came."""
    return Retrying(sleep=sleep, **policy.retrying(what, log))(call)


async def acall_with_retries(
    call: Callable[[], Awaitable[T]],
    *,
    what: str,
    policy: RetryPolicy,
    log: TaskLog,
    sleep: Callable[[float], Awaitable[Any]] = asyncio.sleep,
) -> T:
    """The async twin of ``call_with_retries``."""
    return await AsyncRetrying(sleep=sleep, **policy.retrying(what, log))(call)


def handshake_refusal(error: BaseException) -> BaseException | None:
    """The API server's refusal of a websocket request (an exec: ``websocket.WebSocketBadStatusException``, with
    ``status_code``, ``status_message`` and ``resp_body``) behind ``error``, if that is what failed.

    The ``kubernetes`` client turns it into an ``ApiException`` of status 0 without a body, and its ``ApiClient``
    then fails decoding that missing body (``AttributeError: 'NoneType' object has no attribute 'decode'``): the
    refusal is left only in the exceptions' context, where this finds it.
    """
    seen: set[int] = set()
    current: BaseException | None = error
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        if isinstance(getattr(current, "status_code", None), int) and hasattr(current, "resp_body"):
            return current
        current = current.__cause__ or current.__context__
    return None


def short_error(error: BaseException) -> str:
    """``404 NotFound: pods "x" not found`` from an ApiException's Status body, or from the refusal of a websocket
    request (an exec, ``handshake_refusal``); else the exception, one line."""
    refusal = handshake_refusal(error)
    if refusal is not None:
        status_code: int = refusal.status_code  # type: ignore[attr-defined]
        return _status_text(status_code, getattr(refusal, "status_message", None), getattr(refusal, "resp_body", None))
    status = api_status(error)
    if status is None:
        text = str(error).strip().splitlines()
        return f"{type(error).__name__}: {text[0] if text else ''}".rstrip(": ")
    return _status_text(status, getattr(error, "reason", None), getattr(error, "body", None))


def _status_text(status: int, reason: str | None, body: Any) -> str:
    """``<status> <reason>: <message>``, the reason and message from the answer's Status body when it has one."""
    if isinstance(body, (bytes, bytearray)):
        body = body.decode("utf-8", "replace")
    try:
        document = json.loads(body) if body else {}
    except ValueError:
        document = {}
    if not isinstance(document, dict):
        document = {}
    reason = document.get("reason") or reason or ""
    message = document.get("message") or (body.strip()[:200] if isinstance(body, str) else "")
    return " ".join(part for part in (str(status), str(reason), ":" if message else "", message) if part).replace(
        " :", ":"
    )


def classified(what: str, error: BaseException) -> BaseException:
    """What a request's last failure is raised as: an API answer or a lost connection as its ``job_error``, any other
    error (a bug, a cancellation) as it came. The task's hooks and the triggers raise the same classes this way."""
    if api_status(error) is not None or is_connection_error(error):
        return job_error(what, error)
    return error


def job_error(what: str, error: BaseException) -> KubernetesJobError:
    """The error to raise ``from error``: ``<what>: <status> <reason>: <message>``; a ``ClusterRefusedError`` for a
    refusal, an ``ApiUnavailableError`` when the retries ran out on a transient failure."""
    status = api_status(error)
    return api_error_class(status, unavailable=is_transient(error))(f"{what}: {short_error(error)}", status)

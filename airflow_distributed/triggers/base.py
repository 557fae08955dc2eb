"""What the package's triggers share: their arguments, the cncf hook, and one event around a watch.

A subclass hands its constructor arguments to ``JobWaitTrigger.__init__`` (they become attributes and what
``serialize`` writes back), says what it waits for (``what``, used in logs and messages) and implements
``_wait()``, which returns the event's status fields; ``run`` turns any error into an ``error`` event, so that
``execute_complete`` always gets to clean up.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from functools import cached_property
from typing import Any

from airflow.providers.cncf.kubernetes.hooks.kubernetes import AsyncKubernetesHook
from airflow.triggers.base import BaseTrigger, TriggerEvent

from airflow_distributed.hooks.api_retry import RetryPolicy, acall_with_retries, is_transient, short_error
from airflow_distributed.hooks.job_watch import ResumableWatch, WatchError

WATCH_TIMEOUT = 300


class JobWaitTrigger(BaseTrigger):
    """Wait for one job in the triggerer and fire one event: the base of the package's triggers."""

    job_name: str
    namespace: str
    started_at: float
    kubernetes_conn_id: str | None
    watch_timeout: int
    execution_deadline: float | None

    def __init__(self, **arguments: Any) -> None:
        super().__init__()
        self._arguments = tuple(arguments)
        for name, value in arguments.items():
            setattr(self, name, value)
        self.retry = RetryPolicy()
        self._fired = False

    def serialize(self) -> tuple[str, dict[str, Any]]:
        # Read from the attributes: what the triggerer rebuilds is the trigger as it is now.
        return (f"{type(self).__module__}.{type(self).__qualname__}",
                {name: getattr(self, name) for name in self._arguments})

    @cached_property
    def hook(self) -> AsyncKubernetesHook:
        return AsyncKubernetesHook(conn_id=self.kubernetes_conn_id)

    @property
    def what(self) -> str:
        raise NotImplementedError

    def _event_base(self) -> dict[str, Any]:
        """Fields of every event: ``execute_complete`` needs nothing but the event."""
        return {"job_name": self.job_name, "namespace": self.namespace, "started_at": self.started_at}

    async def run(self) -> AsyncIterator[TriggerEvent]:
        base = self._event_base()
        try:
            payload = {**base, **await self._wait()}
        except Exception as error:
            self.log.exception("waiting for %s failed", self.what)
            payload = {**base, "status": "error", "message": short_error(error)}
        self._fired = True
        yield TriggerEvent(payload)

    async def _wait(self) -> dict[str, Any]:
        """The event's ``status`` and what goes with it."""
        raise NotImplementedError

    # ------------------------------------------------------------------ watch helpers

    def _deadline_passed(self) -> bool:
        return self.execution_deadline is not None and time.time() >= self.execution_deadline

    def _timeout_event(self) -> dict[str, Any]:
        return {"status": "timeout", "message": f"{self.what} reached the task's execution_timeout"}

    def _until_deadline(self, seconds: int) -> int:
        """A watch request's timeout, cut so that the request ends by the task's deadline."""
        if self.execution_deadline is None:
            return seconds
        return max(1, min(seconds, int(self.execution_deadline - time.time()) + 1))

    async def _back_off(self, error: Exception, failures: int, watch: ResumableWatch) -> None:
        """After a failed list or watch: raise ``error`` if it is final, else wait before resuming the watch."""
        if not (isinstance(error, WatchError) or is_transient(error)):
            raise error
        delay = self.retry.backoff(failures)
        if delay is None:
            raise error
        if isinstance(error, WatchError):
            watch.on_gone()  # an error inside the stream: start again from a fresh list
        self.log.warning("watching %s: %s; resuming in %.1fs", self.what, short_error(error), delay)
        await asyncio.sleep(delay)

    async def _request(self, what: str, call: Callable[[], Awaitable[Any]]) -> Any:
        """``call()`` (a ``_preload_content=False`` request), retried; a non-2xx answer raised as ApiException."""

        async def attempt() -> Any:
            response = await call()
            if 200 <= response.status <= 299:
                return response
            # Unread, a refused request would not raise: make it the ApiException the retry loop judges.
            from kubernetes_asyncio.client.exceptions import ApiException
            from kubernetes_asyncio.client.rest import RESTResponse

            data = await response.read()
            response.release()
            raise ApiException(http_resp=RESTResponse(response, data))

        return await acall_with_retries(attempt, what=what, policy=self.retry, log=self.log)


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


__all__ = ["WATCH_TIMEOUT", "JobWaitTrigger", "lines"]

"""What the package's triggers share: their arguments, the cncf hook, and one event around a watch.

Every trigger of one connection in a triggerer process shares one API client (``api_clients``). A subclass hands
its constructor arguments to ``JobWaitTrigger.__init__`` (they become attributes and what
``serialize`` writes back), says what it waits for (``what``, used in logs and messages) and implements
``_wait()``, which returns the event (``JobEvent``: its kind and what goes with it); ``run`` adds the fields every
event carries and turns any error into an ``error`` event, so that ``execute_complete`` always gets to clean up. A
trigger does not watch on its own: it reads the feed of its job from the watch its namespace's triggers share
(``_feed``, ``_read``; ``shared_watch``).
"""

from __future__ import annotations

import contextlib
import functools
import json
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import AbstractAsyncContextManager
from dataclasses import replace
from functools import cached_property
from typing import Any

from airflow.providers.cncf.kubernetes.hooks.kubernetes import AsyncKubernetesHook
from airflow.triggers.base import BaseTrigger, TriggerEvent
from kubernetes_asyncio import client as async_client
from kubernetes_asyncio.client.exceptions import ApiException
from kubernetes_asyncio.client.rest import RESTResponse

from airflow_distributed.exceptions import error_class_named
from airflow_distributed.hooks.api_retry import (
    KubernetesJobError,
    RetryPolicy,
    acall_with_retries,
    classified,
    short_error,
)
from airflow_distributed.hooks.watch_loop import AsyncWatchCalls, WatchPolicy, arun_watch, lines
from airflow_distributed.jobstate.job_event import EventKind, JobEvent
from airflow_distributed.jobstate.watch_timings import WATCH_TIMEOUT, WatchTimings
from airflow_distributed.triggers.api_clients import client_configuration, shared_client
from airflow_distributed.triggers.log_relay import LogRelay, MasterLog, api_read
from airflow_distributed.triggers.shared_watch import Delivery, JobFeed, NamespaceWatch, WatchedKind, subscribe
from airflow_distributed.triggers.shared_watch import log as shared_watch_log

#: The shortest wait for a feed: a deadline a hair away is not waited for in a busy loop.
_LEAST_WAIT = 0.01


class JobWaitTrigger(BaseTrigger):
    """Wait for one job in the triggerer and fire one event: the base of the package's triggers."""

    job_name: str
    namespace: str
    started_at: float
    kubernetes_conn_id: str | None
    watch_timeout: int | None
    watch_timings: dict[str, Any] | None
    execution_deadline: float | None
    resume_state: dict[str, Any] | None
    #: seconds between two relays of the master's new lines into the task log (``log_relay``); ``None``: none
    logging_interval: float | None = None
    #: where an earlier trigger of the same try stopped relaying (``LogRelay.state``)
    log_cursor: dict[str, Any] | None = None

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
        return AsyncKubernetesHook(conn_id=self.kubernetes_conn_id, client_configuration=client_configuration())

    def connection_identity(self) -> dict[str, Any]:
        """The arguments that configure ``hook``: triggers with the same identity share one API client."""
        return {"conn_id": self.kubernetes_conn_id}

    def _connection_key(self) -> str:
        return json.dumps(self.connection_identity(), sort_keys=True, default=str)

    def api_client(self) -> AbstractAsyncContextManager[Any]:
        """The API client of this trigger's connection, shared with the other triggers of the process
        (``api_clients``)."""
        return shared_client(self._connection_key(), lambda: self.hook.get_conn())  # the hook is built by the opener

    @property
    def what(self) -> str:
        raise NotImplementedError

    def _event_base(self) -> dict[str, Any]:
        """Fields of every event (``JobEvent``'s): ``execute_complete`` needs nothing but the event."""
        base = {"job_name": self.job_name, "namespace": self.namespace, "started_at": self.started_at}
        if self.resume_state is not None:
            base["resume_state"] = self.resume_state
        return base

    async def run(self) -> AsyncIterator[TriggerEvent]:
        base = self._event_base()
        relay = self._log_relay()
        event: JobEvent
        try:
            async with relay.running() if relay is not None else contextlib.nullcontext():
                event = await self._wait()
        except Exception as error:
            self.log.exception("waiting for %s failed", self.what)
            # A KubernetesJobError says already what was waited for and why it ended.
            message = str(error) if isinstance(error, KubernetesJobError) else short_error(error)
            named = type(error).__name__
            # The resumed task raises the same class, where it is one of the package's.
            event = JobEvent(EventKind.ERROR, message=message,
                             error_class=named if error_class_named(named) is type(error) else None)
        event = replace(event, **{key: value for key, value in base.items() if getattr(event, key) is None})
        if relay is not None:
            event = replace(event, log_cursor=relay.state())  # the resumed task shows only the lines after it
        self._fired = True
        yield TriggerEvent(event.to_payload())

    async def _wait(self) -> JobEvent:
        """The event, without the fields every event carries (``_event_base``)."""
        raise NotImplementedError

    # ------------------------------------------------------------------ the master's log

    def _log_relay(self) -> LogRelay | None:
        """The relay of the master's new lines into the task log, every ``logging_interval`` seconds."""
        if not self.logging_interval:
            return None

        async def read(master: MasterLog, query: Any) -> AsyncIterator[bytes]:
            async with self.api_client() as api:
                async for piece in api_read(api, self.namespace, master, query, self._answer):
                    yield piece

        return LogRelay(job=self.job_name, interval=float(self.logging_interval), locate=self._master_log,
                        read=read, emit=self.log.info, cursor=self.log_cursor)

    async def _master_log(self) -> MasterLog | None:
        """The master's log, once its container has started (a subclass that relays it says how it is found)."""
        return None

    # ------------------------------------------------------------------ the shared watch

    @property
    def timings(self) -> WatchTimings:
        return WatchTimings.of(self.watch_timings, server_timeout=self.watch_timeout)

    def _deadline_passed(self) -> bool:
        return self.execution_deadline is not None and time.time() >= self.execution_deadline

    def _timeout(self) -> JobEvent:
        return JobEvent(EventKind.TIMEOUT, message=f"{self.what} reached the task's execution_timeout")

    def _feed(self, kind: WatchedKind, job: str) -> AbstractAsyncContextManager[JobFeed]:
        """The feed of ``job`` from the watch of ``kind`` in this trigger's namespace, shared by the triggers of
        this connection, namespace and watch timings on this event loop (``shared_watch``)."""
        timings = self.timings
        key = (self._connection_key(), self.namespace, kind, json.dumps(timings.as_dict(), sort_keys=True))
        return subscribe(key, kind, job, lambda watch: self._follow(watch, timings))

    async def _follow(self, watch: NamespaceWatch, timings: WatchTimings) -> None:
        """The shared watch of ``watch.kind`` in this trigger's namespace, through ``arun_watch``, until cancelled."""
        kind = watch.kind
        selector: dict[str, Any] = {"label_selector": kind.label_selector} if kind.label_selector else {}
        list_objects: Callable[..., Awaitable[Any]]
        async with self.api_client() as api:
            if kind.group:
                list_objects = functools.partial(async_client.CustomObjectsApi(api).list_namespaced_custom_object,
                                                 kind.group, kind.version, self.namespace, kind.plural)
            elif kind.plural == "pods":
                list_objects = functools.partial(async_client.CoreV1Api(api).list_namespaced_pod, self.namespace)
            else:
                raise ValueError(f"no shared watch of core {kind.plural!r}")
            calls = AsyncWatchCalls(
                list_=lambda: self._json(list_objects(**selector, _preload_content=False)),
                open_watch=lambda version, seconds, timeout: self._answer(list_objects(
                    **selector, watch=True, resource_version=version, allow_watch_bookmarks=True,  # type: ignore[arg-type]
                    timeout_seconds=seconds, _request_timeout=timeout, _preload_content=False)),
                on_list=watch.on_list,
                on_line=watch.on_line,
                done=lambda: False,  # until the last trigger leaves (cancelled)
            )
            policy = WatchPolicy(f"watching {kind.name} in namespace {self.namespace}", timings, self.retry)
            await arun_watch(watch, calls, policy, log=shared_watch_log)

    async def _read(self, feed: JobFeed, apply: Callable[[Delivery], Any], ended: Callable[[], bool],
                    wake_in: Callable[[], float | None] = lambda: None,
                    check: Callable[[], Awaitable[bool]] | None = None) -> bool:
        """Hand what ``feed`` brings to ``apply`` until ``ended()`` (``True``) or the task's deadline (``False``).

        :param wake_in: seconds until the job's state is to be looked at again with nothing new (a startup
            deadline, the next paced LIST); ``None``: only when something comes.
        :param check: a request of the trigger's own, made when due; returns whether it made one.
        """
        while not self._deadline_passed():
            if feed.viewed:
                if ended():
                    return True
                if check is not None and await check():
                    continue
            waits = [wait for wait in (wake_in() if feed.viewed else None, self._until_deadline()) if wait is not None]
            delivery = await feed.next(max(_LEAST_WAIT, min(waits)) if waits else None)
            if delivery is not None:
                apply(delivery)
        return False

    def _until_deadline(self) -> float | None:
        return None if self.execution_deadline is None else self.execution_deadline - time.time()

    async def _call(self, call: Callable[[], Awaitable[Any]], what: str) -> Any:
        """``call()`` with the trigger's retries; a failed API request ends as the ``KubernetesJobError`` of its
        status (a refusal as ``ClusterRefusedError``, which the event names for the retry policy), as the task's
        own requests do (``KubeApiHook._call``)."""
        try:
            return await acall_with_retries(call, what=what, policy=self.retry, log=self.log)
        except Exception as error:
            failure = classified(what, error)
            if failure is error:
                raise
            raise failure from error

    @staticmethod
    async def _answer(call: Awaitable[Any]) -> Any:
        """The response of ``call`` (a ``_preload_content=False`` request); a non-2xx answer raised as the
        ApiException the watch policy judges (unread, a refused request would not raise)."""
        response = await call
        if 200 <= response.status <= 299:
            return response
        data = await response.read()
        response.release()
        # The client's own annotation names aiohttp's response; it reads status, reason and data of this one.
        raise ApiException(http_resp=RESTResponse(response, data))  # type: ignore[arg-type]

    @classmethod
    async def _json(cls, call: Awaitable[Any]) -> Any:
        response = await cls._answer(call)
        try:
            return json.loads(await response.read())
        finally:
            response.release()


__all__ = ["WATCH_TIMEOUT", "JobWaitTrigger", "lines"]

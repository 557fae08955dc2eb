"""One watch per (connection, namespace, kind) in a triggerer, fanned out to the triggers of the jobs in it.

A triggerer holds hundreds of deferred jobs. A watch per job costs a connection each (over TLS, asyncio's 256 KiB
read buffer and OpenSSL's state) and the API server a long-running request each. Here the triggers of one event
loop whose jobs live in the same namespace share one LIST and one watch of the kind they wait on (the provider's
pods, label-selected by ``airflow-distributed/job``; a Kubeflow or TrainJob kind), driven by the one watch loop
(``hooks.watch_loop.arun_watch``): resumed from the last resourceVersion or bookmark, listed again after 410
Gone, a dropped connection or an expired version handled once for all.

- ``NamespaceWatch`` (pure): the watched objects of a namespace by job, from a LIST and the watch's lines, and
  the ``JobFeed`` of every subscribed job. A job that subscribes while the watch runs gets its objects from this
  cache at once, in the same step as it is registered, so no event falls between the two.
- ``JobFeed`` (pure): what one trigger has not read yet of its job, coalesced: a full view after a LIST, then the
  latest event per object. It holds at most one entry per object and never blocks the watch: a slow trigger
  reads the latest state of each object, not every event (beyond ``MAX_PENDING`` objects it gets a full view).
- ``subscribe`` (I/O): the registry of running watches, keyed by the running event loop and the watch's key. The
  first trigger starts the watch as a task of its own; a trigger that ends or is cancelled leaves; the last one
  out stops the watch. A watch that fails for good (401/403, the reconnect budget spent) fails every feed.

Nothing is shared across event loops or processes: a restarted triggerer rebuilds every watch from a LIST.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import logging
import weakref
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from airflow_distributed.hooks.api_retry import KubernetesJobError, short_error
from airflow_distributed.jobstate.watch_stream import ResumableWatch

log = logging.getLogger(__name__)

#: Objects a feed keeps apart before it is given a full view of its job instead (far above any job's pods).
MAX_PENDING = 10_000


@dataclass(frozen=True)
class WatchedKind:
    """What a shared watch follows in a namespace, and which job each object belongs to.

    :param group: API group (``""`` for the core API).
    :param version: API version.
    :param plural: the resource, e.g. ``pods`` or ``pytorchjobs``.
    :param label_selector: the objects of interest (``None``: all of the kind in the namespace).
    :param job_of: the job an object belongs to (``None``: none of ours).
    :param keep: what of each object is kept (the whole object when ``None``).
    """

    group: str
    version: str
    plural: str
    label_selector: str | None
    job_of: Callable[[Mapping[str, Any]], str | None] = field(compare=False)
    keep: Callable[[Mapping[str, Any]], Mapping[str, Any]] | None = field(default=None, compare=False)

    @property
    def name(self) -> str:
        """``pods``, ``pytorchjobs.kubeflow.org``: for keys and logs."""
        return f"{self.plural}.{self.group}" if self.group else self.plural


def _name(obj: Mapping[str, Any]) -> str | None:
    return (obj.get("metadata") or {}).get("name")


@dataclass
class Delivery:
    """What a feed hands its trigger: a full view of the job (after a LIST), if one came, then the events since.

    :param snapshot: every object of the job as listed (to replace what the trigger knew), or ``None``.
    :param events: (``ADDED`` | ``MODIFIED`` | ``DELETED``, object), the latest per object, oldest first.
    """

    snapshot: list[Mapping[str, Any]] | None
    events: list[tuple[str, Mapping[str, Any]]]


class JobFeed:
    """One trigger's subscription to its job's objects: a bounded, coalescing queue filled by ``NamespaceWatch``.

    :param job: the job's name (its pods' ``airflow-distributed/job`` label, or the custom object's name).
    """

    def __init__(self, job: str) -> None:
        self.job = job
        #: Whether a full view was handed over (the job's state is known from a LIST or the cache).
        self.viewed = False
        self._snapshot: list[Mapping[str, Any]] | None = None
        self._events: dict[str, tuple[str, Mapping[str, Any]]] = {}
        self._error: BaseException | None = None
        self._wake = asyncio.Event()

    @property
    def pending(self) -> int:
        """Objects with an event not read yet (at most one entry each)."""
        return len(self._events)

    def view(self, objects: Iterable[Mapping[str, Any]]) -> None:
        """A full view of the job replaces whatever was not read yet."""
        self._snapshot = list(objects)
        self._events.clear()
        self._wake.set()

    def event(self, kind: str, name: str, obj: Mapping[str, Any]) -> None:
        """The latest event of object ``name``; an earlier one not read yet is dropped (the latest state counts)."""
        self._events.pop(name, None)
        self._events[name] = (kind, obj)
        self._wake.set()

    def fail(self, error: BaseException) -> None:
        """The shared watch failed for good: the next ``take`` raises ``error``."""
        self._error = error
        self._wake.set()

    def take(self) -> Delivery | None:
        """Everything not read yet (``None``: nothing).

        :raises KubernetesJobError: the shared watch failed for good; the message says why.
        """
        if self._error is not None:
            # A fresh error per trigger: one exception raised in many tasks would pile up their tracebacks.
            error = self._error
            message = str(error) if isinstance(error, KubernetesJobError) else short_error(error)
            # Of the same class (refused, unavailable...), so that the trigger's event names it for the retry policy.
            fresh = type(error) if isinstance(error, KubernetesJobError) else KubernetesJobError
            raise fresh(message, getattr(error, "status", None)) from error
        self._wake.clear()
        if self._snapshot is None and not self._events:
            return None
        delivery = Delivery(self._snapshot, list(self._events.values()))
        self.viewed = self.viewed or self._snapshot is not None
        self._snapshot, self._events = None, {}
        return delivery

    async def next(self, timeout: float | None) -> Delivery | None:
        """What came, waiting up to ``timeout`` seconds for something (``None``: no limit); ``None`` if nothing."""
        delivery = self.take()
        if delivery is not None:
            return delivery
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._wake.wait(), timeout)
        return self.take()


class NamespaceWatch(ResumableWatch):
    """The objects of one kind in one namespace, by job, and the feeds of the jobs subscribed (pure).

    The watch loop feeds it like any ``ResumableWatch`` (``on_list``, ``on_line``, ``on_gone``); each LIST gives
    every subscribed job a full view (an object known before and not listed was deleted: the tracker tells), each
    event goes to the feeds of its job only.
    """

    def __init__(self, kind: WatchedKind) -> None:
        super().__init__()
        self.kind = kind
        self.listed = False
        self.objects: dict[str, dict[str, Mapping[str, Any]]] = {}
        self.feeds: dict[str, list[JobFeed]] = {}

    def subscribe(self, job: str) -> JobFeed:
        """A feed of ``job``; once the namespace is listed, it starts with the job's objects from the cache."""
        feed = JobFeed(job)
        self.feeds.setdefault(job, []).append(feed)
        if self.listed:
            feed.view(self.objects.get(job, {}).values())
        return feed

    def unsubscribe(self, feed: JobFeed) -> None:
        feeds = self.feeds.get(feed.job, [])
        if feed in feeds:
            feeds.remove(feed)
        if not feeds:
            self.feeds.pop(feed.job, None)

    @property
    def subscribers(self) -> int:
        return sum(len(feeds) for feeds in self.feeds.values())

    def on_list(self, body: Mapping[str, Any]) -> None:
        self._list_version(body)
        objects: dict[str, dict[str, Mapping[str, Any]]] = {}
        for item in body.get("items") or []:
            job, name = self.kind.job_of(item), _name(item)
            if job is not None and name is not None:
                objects.setdefault(job, {})[name] = self._keep(item)
        self.objects, self.listed = objects, True
        for job, feeds in self.feeds.items():
            for feed in feeds:
                feed.view(objects.get(job, {}).values())

    def on_line(self, line: str | bytes) -> None:
        """One line of the watch stream (``WatchGone`` / ``WatchError`` raised as ``ResumableWatch._event`` does)."""
        event = self._event(line)
        if event is None:
            return
        kind, obj = event
        job, name = self.kind.job_of(obj), _name(obj)
        if job is None or name is None:
            return
        kept = self._keep(obj)
        if kind == "DELETED":
            objects = self.objects.get(job, {})
            objects.pop(name, None)
            if not objects:
                self.objects.pop(job, None)
        else:
            self.objects.setdefault(job, {})[name] = kept
        for feed in self.feeds.get(job, ()):
            if feed.pending >= MAX_PENDING:
                feed.view(self.objects.get(job, {}).values())
            else:
                feed.event(kind, name, kept)

    def fail(self, error: BaseException) -> None:
        for feeds in self.feeds.values():
            for feed in feeds:
                feed.fail(error)

    def _keep(self, obj: Mapping[str, Any]) -> Mapping[str, Any]:
        return dict(obj) if self.kind.keep is None else self.kind.keep(obj)


# ------------------------------------------------------------------------------------------ the registry (I/O)


@dataclass
class _Running:
    watch: NamespaceWatch
    task: asyncio.Task[None] | None = None


_WATCHES: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, dict[Any, _Running]] = weakref.WeakKeyDictionary()


@contextlib.asynccontextmanager
async def subscribe(key: Any, kind: WatchedKind, job: str,
                    follow: Callable[[NamespaceWatch], Awaitable[None]]) -> AsyncIterator[JobFeed]:
    """The feed of ``job`` from the watch ``key`` on the running loop, started with ``follow(watch)`` if no trigger
    holds it yet; leaving the block unsubscribes, and the last one out stops the watch.

    :param key: what makes two watches the same (connection, namespace, kind, timings): hashable.
    :param kind: what the watch follows.
    :param job: the subscribing trigger's job.
    :param follow: runs the watch loop over ``watch`` until cancelled; an error it raises fails every feed.
    """
    watches = _WATCHES.setdefault(asyncio.get_running_loop(), {})
    running = watches.get(key)
    if running is None:
        running = watches[key] = _Running(NamespaceWatch(kind))
        # A context of its own: the watch serves every trigger, so its logs are the triggerer's, not the first job's.
        running.task = asyncio.create_task(_follow(watches, key, running, follow), name="shared watch",
                                           context=contextvars.Context())
    feed = running.watch.subscribe(job)
    try:
        yield feed
    finally:
        running.watch.unsubscribe(feed)
        if running.watch.subscribers == 0 and running.task is not None:
            if watches.get(key) is running:
                del watches[key]  # a trigger arriving from now on starts a watch of its own
            running.task.cancel()
            # asyncio.wait neither raises the task's end nor swallows a cancellation of this one.
            await asyncio.wait([running.task])


async def _follow(watches: dict[Any, _Running], key: Any, running: _Running,
                  follow: Callable[[NamespaceWatch], Awaitable[None]]) -> None:
    try:
        await follow(running.watch)
        raise RuntimeError(f"the shared watch of {running.watch.kind.name} ended")  # it runs until cancelled
    except asyncio.CancelledError:
        raise
    except Exception as error:
        if watches.get(key) is running:
            del watches[key]
        log.warning("the shared watch of %s failed: %s", running.watch.kind.name, error)
        running.watch.fail(error)


def open_watches() -> int:
    """Shared watches running on the running loop (for tests and benchmarks)."""
    return len(_WATCHES.get(asyncio.get_running_loop(), {}))


__all__ = ["MAX_PENDING", "Delivery", "JobFeed", "NamespaceWatch", "WatchedKind", "open_watches", "subscribe"]

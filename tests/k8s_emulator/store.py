"""Versioned object store with a watch history, the emulator's stand-in for etcd.

Every write bumps one cluster-wide integer resourceVersion and appends an event to a bounded history
that watches replay from. Stored objects are never mutated in place: a write stores a new dict, so the
objects referenced by history events stay valid snapshots and can be serialized outside the lock.
"""

from __future__ import annotations

import bisect
import copy
import threading
from collections.abc import Iterator
from typing import NamedTuple

ResourceKey = tuple[str, str]  # (group, plural)
ObjectKey = tuple[str, str]  # (namespace or "", name)


class WatchEvent(NamedTuple):
    rv: int
    resource: ResourceKey
    type: str  # ADDED, MODIFIED, DELETED
    obj: dict
    prev: dict | None


class LogLine(NamedTuple):
    timestamp_ns: int
    text: str


class Store:
    def __init__(self, history_limit: int = 100_000):
        self.lock = threading.RLock()
        self.changed = threading.Condition(self.lock)
        self.rv = 0
        # Watches and exact-version lists from a resourceVersion below this floor get 410 Gone.
        self.floor = 0
        self.closed = False
        self._history_limit = history_limit
        self._objects: dict[ResourceKey, dict[ObjectKey, dict]] = {}
        self._events: list[WatchEvent] = []
        self._event_rvs: list[int] = []
        # Container logs keyed by pod uid so a re-created pod starts with an empty log.
        self.logs: dict[tuple[str, str], list[LogLine]] = {}

    # -- reads (callers hold the lock when they need consistency across calls)

    def get(self, resource: ResourceKey, namespace: str, name: str) -> dict | None:
        return self._objects.get(resource, {}).get((namespace, name))

    def items(self, resource: ResourceKey, namespace: str | None = None) -> list[dict]:
        bucket = self._objects.get(resource, {})
        keys = sorted(k for k in bucket if namespace is None or k[0] == namespace)
        return [bucket[k] for k in keys]

    def resources(self) -> list[ResourceKey]:
        return list(self._objects)

    def find_by_uid(self, uid: str) -> tuple[ResourceKey, dict] | None:
        for resource, bucket in self._objects.items():
            for obj in bucket.values():
                if obj["metadata"].get("uid") == uid:
                    return resource, obj
        return None

    # -- writes

    def _record(self, resource: ResourceKey, etype: str, obj: dict, prev: dict | None) -> None:
        event = WatchEvent(self.rv, resource, etype, obj, prev)
        self._events.append(event)
        self._event_rvs.append(self.rv)
        if len(self._events) > self._history_limit:
            drop = len(self._events) // 2
            self.floor = self._event_rvs[drop - 1]
            del self._events[:drop]
            del self._event_rvs[:drop]
        self.changed.notify_all()

    def put(self, resource: ResourceKey, obj: dict, prev: dict | None) -> dict:
        """Store ``obj`` (copied) with a new resourceVersion; ADDED when ``prev`` is None, else MODIFIED."""
        with self.lock:
            self.rv += 1
            stored = copy.deepcopy(obj)
            stored["metadata"]["resourceVersion"] = str(self.rv)
            meta = stored["metadata"]
            self._objects.setdefault(resource, {})[(meta.get("namespace", ""), meta["name"])] = stored
            self._record(resource, "ADDED" if prev is None else "MODIFIED", stored, prev)
            return stored

    def remove(self, resource: ResourceKey, namespace: str, name: str, final: dict | None = None) -> dict | None:
        """Delete an object; the DELETED event carries its last state (or ``final``) at the deletion's
        resourceVersion."""
        with self.lock:
            prev = self._objects.get(resource, {}).pop((namespace, name), None)
            if prev is None:
                return None
            self.rv += 1
            gone = copy.deepcopy(final if final is not None else prev)
            gone["metadata"]["resourceVersion"] = str(self.rv)
            self._record(resource, "DELETED", gone, prev)
            return gone

    def compact(self) -> None:
        with self.lock:
            self.floor = self.rv
            self._events.clear()
            self._event_rvs.clear()
            self.changed.notify_all()

    def events_after(self, rv: int) -> list[WatchEvent]:
        with self.lock:
            start = bisect.bisect_right(self._event_rvs, rv)
            return self._events[start:]

    def notify(self) -> None:
        with self.lock:
            self.changed.notify_all()

    def close(self) -> None:
        with self.lock:
            self.closed = True
            self.changed.notify_all()

    def iter_all(self) -> Iterator[tuple[ResourceKey, dict]]:
        for resource, bucket in self._objects.items():
            for obj in list(bucket.values()):
                yield resource, obj

    def append_log(self, pod_uid: str, container: str, lines: list[LogLine]) -> None:
        with self.lock:
            self.logs.setdefault((pod_uid, container), []).extend(lines)
            self.changed.notify_all()

    def log_lines(self, pod_uid: str, container: str) -> list[LogLine]:
        with self.lock:
            return list(self.logs.get((pod_uid, container), []))

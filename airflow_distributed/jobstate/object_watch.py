"""One named object followed by a LIST and one watch: its latest version and whether it was deleted (pure).

The Kubeflow training job is a single custom object, so its wait is the same state machine as ``job_watch``'s
over pods, narrowed to one name (``fieldSelector=metadata.name=<name>``): LIST, then one watch resumed from the
last resourceVersion, listed again only after 410 Gone. The sync hook and the async trigger feed it alike.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from airflow_distributed.jobstate.watch_stream import ResumableWatch, WatchError, WatchGone


def name_selector(name: str) -> str:
    """The field selector of one object by name (every resource, custom ones too, supports it)."""
    return f"metadata.name={name}"


class ObjectWatch(ResumableWatch):
    """The latest version of the object ``name``, from a LIST and the events of a watch.

    ``obj`` is ``None`` until it is seen and after it is deleted; ``deleted`` tells the second case apart.

    The missing-object rule, the same for the synchronous wait and the trigger: an object that a consistent read
    (a LIST or GET from etcd, not from a cache) does not find is gone, seen before or not: the job was deleted
    before it finished (``on_list(..., consistent=True)``, a ``DELETED`` event). What a shared watch's cache does
    not hold yet is only not seen (the object may have been created after the cache's last event): the trigger
    asks a consistent read before it says so.
    """

    def __init__(self, name: str) -> None:
        super().__init__()
        self.name = name
        self.obj: dict[str, Any] | None = None
        self.deleted = False

    def on_list(self, body: Mapping[str, Any], *, consistent: bool = True) -> bool:
        """A LIST's answer; returns whether the object changed.

        :param consistent: the answer is a consistent read, so an object it lacks is gone (see the class).
        """
        self._list_version(body)
        found = next((dict(item) for item in body.get("items") or []
                      if (item.get("metadata") or {}).get("name") == self.name), None)
        changed = self._set(found)
        if found is None and consistent:
            self.deleted = True
        return changed

    def on_line(self, line: str | bytes) -> bool:
        """One line of the watch stream; returns whether the object changed (see ``ResumableWatch._event``)."""
        event = self._event(line)
        if event is None or (event[1].get("metadata") or {}).get("name") != self.name:
            return False
        kind, obj = event
        return self._set(None if kind == "DELETED" else dict(obj))

    def _set(self, obj: dict[str, Any] | None) -> bool:
        changed = obj != self.obj
        if obj is None and self.obj is not None:
            self.deleted = True
        elif obj is not None:
            self.deleted = False
        self.obj = obj
        return changed


__all__ = ["ObjectWatch", "WatchError", "WatchGone", "name_selector"]

"""The watch protocol every waiter shares, as a parser: LIST, then one watch resumed from the last resourceVersion,
listed again after 410 Gone; the I/O loop around it is ``hooks/watch_loop.py`` (pure)."""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any


class WatchGone(Exception):
    """The watch's resourceVersion is too old (410 Gone / Expired): list again."""


class WatchError(Exception):
    """The watch stream carried an ERROR event other than 410."""


class ResumableWatch:
    """The watch protocol shared by every waiter: LIST, then one watch resumed from the last resourceVersion,
    listed again only after 410 Gone. Subclasses say what a LIST and an event mean to them.

    The I/O loop around it asks ``needs_list``, performs the request and hands the results back.
    """

    def __init__(self) -> None:
        self.resource_version: str | None = None

    @property
    def needs_list(self) -> bool:
        return self.resource_version is None

    def on_gone(self) -> None:
        self.resource_version = None

    def _list_version(self, body: Mapping[str, Any]) -> None:
        self.resource_version = (body.get("metadata") or {}).get("resourceVersion") or None

    def _event(self, line: str | bytes) -> tuple[str, dict[str, Any]] | None:
        """An event of the watch stream as (type, object); ``None`` for blank lines and bookmarks.

        :raises WatchGone: the resourceVersion expired; ``needs_list`` is now true.
        :raises WatchError: any other ERROR event.
        """
        if isinstance(line, (bytes, bytearray)):
            line = line.decode("utf-8", "replace")
        if not line.strip():
            return None
        event = json.loads(line)
        kind, obj = event.get("type"), event.get("object") or {}
        if kind == "ERROR":
            if obj.get("code") == 410:
                self.resource_version = None
                raise WatchGone(obj.get("message") or "resource version expired")
            raise WatchError(f"{obj.get('code')} {obj.get('reason')}: {obj.get('message')}")
        version = (obj.get("metadata") or {}).get("resourceVersion")
        if version:
            self.resource_version = version
        return None if kind == "BOOKMARK" else (kind, obj)

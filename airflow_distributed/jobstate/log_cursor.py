"""Where a reader of a container's log stands: timestamps of ``timestamps=true`` lines, the cursor that keeps a
line from being shown twice across reconnects, deferrals and recreated pods (pure)."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from datetime import datetime, timezone
from typing import Any

from airflow_distributed.replica.live_report import is_record, reports_progress


def parse_timestamp_ns(text: str) -> int:
    """RFC 3339 with up to nanoseconds (as ``timestamps=true`` log lines carry) -> nanoseconds since the epoch."""
    text = text.strip()
    if text.endswith(("Z", "z")):
        text = text[:-1] + "+00:00"
    fraction = 0
    if "." in text:
        head, rest = text.split(".", 1)
        count = len(rest) - len(rest.lstrip("0123456789"))
        digits, zone = rest[:count], rest[count:]
        fraction = int((digits + "000000000")[:9])
        text = head + zone
    moment = datetime.fromisoformat(text)
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=timezone.utc)
    return int(moment.timestamp()) * 10**9 + fraction


def format_since_time(timestamp_ns: int) -> str:
    """``sinceTime`` for a log request: whole seconds, rounded down (the API keeps no fraction of it)."""
    return datetime.fromtimestamp(timestamp_ns // 10**9, tz=timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


class LogCursor:
    """Where a followed log is: reconnect with ``since_time()`` and ``accept()`` drops what was already seen.

    Lines come with ``timestamps=true``. ``sinceTime`` has whole seconds, so a reconnect repeats the lines of
    the last second; those with the last timestamp seen are skipped as many times as they were emitted.
    """

    def __init__(self) -> None:
        self.last_ns: int | None = None
        #: when the log's first line and first progress record were printed (the job's startup phases)
        self.first_ns: int | None = None
        self.first_progress_ns: int | None = None
        self._emitted_at_last = 0
        self._to_skip = 0

    def since_time(self) -> str | None:
        return None if self.last_ns is None else format_since_time(self.last_ns)

    def reconnecting(self) -> None:
        self._to_skip = self._emitted_at_last

    def accept(self, line: str) -> str | None:
        """The text of a new line, or ``None`` for a line already emitted."""
        stamp, _, text = line.partition(" ")
        try:
            ns = parse_timestamp_ns(stamp)
        except ValueError:
            return line  # not a timestamped line (should not happen): never drop output
        if self.last_ns is not None and ns < self.last_ns:
            return None
        if self.last_ns is not None and ns == self.last_ns:
            if self._to_skip > 0:
                self._to_skip -= 1
                return None
            self._emitted_at_last += 1
            self._note_first(ns, text)
            return text
        self.last_ns, self._emitted_at_last, self._to_skip = ns, 1, 0
        self._note_first(ns, text)
        return text

    def _note_first(self, ns: int, text: str) -> None:
        if is_record(text):
            if self.first_progress_ns is None and reports_progress(text):
                self.first_progress_ns = ns
        elif self.first_ns is None:
            self.first_ns = ns

    def as_dict(self) -> dict[str, int] | None:
        """Where the cursor is, JSON-safe (a trigger's event, the next trigger's argument); ``None`` before a line."""
        if self.last_ns is None:
            return None
        firsts = {key: value for key in ("first_ns", "first_progress_ns") if (value := getattr(self, key)) is not None}
        return {"last_ns": self.last_ns, "emitted_at_last": self._emitted_at_last, **firsts}

    @classmethod
    def from_dict(cls, state: Mapping[str, Any] | None) -> LogCursor:
        cursor = cls()
        if state and isinstance(state.get("last_ns"), int):
            cursor.last_ns = state["last_ns"]
            cursor._emitted_at_last = int(state.get("emitted_at_last") or 0)
            cursor._to_skip = cursor._emitted_at_last
            for key in ("first_ns", "first_progress_ns"):
                if isinstance(state.get(key), int):
                    setattr(cursor, key, state[key])
        return cursor


def strip_timestamps(lines: Iterable[str]) -> list[str]:
    return [line.partition(" ")[2] if line[:4].isdigit() else line for line in lines]

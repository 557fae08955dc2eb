"""The hang watchdog's clock: when a running job last showed progress, and whether it has been quiet too long.

Pure: the waiter hands it, now and then, a mark of what the master has shown so far (lines printed, the progress,
metrics and newest history point of its output document) and the step it last reported; any change of the mark is
progress. A job is hung once ``timeout`` seconds pass without one while every replica runs; a job that is slow but
reports is never hung. Times are the caller's clock.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from typing import Any

from airflow_distributed.outputs import UNREADABLE, parse_output_document


class ProgressWatch:
    """When the master last showed progress.

    :param timeout: seconds without progress after which the job is hung (``progress_timeout``).
    :param started_at: when the wait began: the first ``timeout`` counts from there.
    """

    def __init__(self, timeout: float, started_at: float) -> None:
        if not timeout > 0:
            raise ValueError(f"progress_timeout must be > 0 seconds, not {timeout!r}")
        self.timeout = timeout
        self.changed_at = started_at
        self._mark: Any = None
        #: the last step the master reported, and when it was first seen
        self.last_step: Any = None
        self.last_step_at: float | None = None

    def observe(self, mark: Any, step: Any, now: float) -> None:
        """What the master has shown as of ``now``; a mark unlike the last one is progress."""
        if mark != self._mark:
            self._mark = mark
            self.changed_at = now
        if step is not None and step != self.last_step:
            self.last_step, self.last_step_at = step, now

    def hung(self, now: float) -> bool:
        return now - self.changed_at >= self.timeout

    def describe(self, now: float) -> str:
        """Why the job is hung, for its failure message."""
        quiet = now - self.changed_at
        if self.last_step is None:
            last = "it reported no step"
        else:
            assert self.last_step_at is not None
            last = f"its last step reported was {self.last_step}, {now - self.last_step_at:.0f}s ago"
        return (f"the job hung: the master reported no progress or metric and printed no line for {quiet:.0f}s "
                f"(progress_timeout {self.timeout:g}s) while every replica ran; {last}")


def document_mark(document: Mapping[str, Any]) -> tuple[Any, ...]:
    """What of the master's output document counts as progress: its progress, metrics and newest history point."""
    history = document.get("history") or []
    return document.get("progress"), document.get("metrics"), history[-1:]


def document_step(document: Mapping[str, Any]) -> Any:
    """The step the master last reported: its progress's, else its newest history point's."""
    progress = document.get("progress") or {}
    if isinstance(progress, Mapping) and progress.get("step") is not None:
        return progress["step"]
    history = document.get("history") or []
    newest = history[-1] if history else None
    return newest.get("step") if isinstance(newest, Mapping) else None


class HangWatchdog:
    """``progress_timeout`` where the waiter sees the master's output itself (the local backend's task, a Ray job's
    driver): asked at every poll while every replica runs whether the job is hung (why, or ``None``).

    Progress is a line the master printed, or a change of its output document's progress, metrics or newest history
    point (read at most once a second).

    :param read_document: the master's output document as text (``None``: not written yet).
    :param master_lines: how many lines the master has printed so far.
    """

    def __init__(self, timeout: float, *, read_document: Callable[[], str | None], master_lines: Callable[[], int],
                 clock: Callable[[], float] = time.monotonic) -> None:
        self._read, self._lines, self._clock = read_document, master_lines, clock
        self.watch = ProgressWatch(timeout, clock())
        self._interval = min(1.0, timeout / 4)
        self._next = float("-inf")
        self._document: Any = None
        self._step: Any = None

    def __call__(self) -> str | None:
        now = self._clock()
        if now >= self._next:
            self._next = now + self._interval
            document = parse_output_document(self._read())
            if not document.get(UNREADABLE):  # half written by hand: the next look reads it whole
                self._document, self._step = document_mark(document), document_step(document)
        self.watch.observe((self._lines(), self._document), self._step, now)
        return self.watch.describe(now) if self.watch.hung(now) else None


__all__ = ["HangWatchdog", "ProgressWatch", "document_mark", "document_step"]

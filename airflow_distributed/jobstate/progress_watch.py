"""The hang watchdog's clock: when a running job last showed progress, and whether it has been quiet too long.

Pure: the waiter hands it, now and then, a mark of what the master has shown so far (lines printed, the progress,
metrics, newest history point and report time of its output document), the step it last reported and when the
master made that change; any change of the mark is progress, timed from when the master made it (a report's own
time, ``reported_at``), not from when the waiter saw it. A job is hung once ``timeout`` seconds pass without one
while every replica runs; a job that is slow but reports is never hung. Times are the caller's clock.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from typing import Any

from airflow_distributed.contract import REPORTED_AT
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
        #: the last step the master reported, and when it reported it (first seen, for a report without a time)
        self.last_step: Any = None
        self.last_step_at: float | None = None

    def observe(self, mark: Any, step: Any, now: float, at: float | None = None, step_at: float | None = None
                ) -> None:
        """What the master has shown as of ``now``; a mark unlike the last one is progress.

        :param mark: what the master has shown so far (lines, its report), compared with the last one.
        :param step: the step it last reported (``None``: none yet).
        :param now: the caller's clock now.
        :param at: when the master made the change (its report's time, on the caller's clock); ``None``: ``now``.
            Kept between the last change and ``now``: a clock apart from the caller's cannot move the clock back.
        :param step_at: when it reported ``step``, if not at ``at`` (a line printed after the report).
        """
        floor = self.changed_at
        if mark != self._mark:
            self._mark = mark
            self.changed_at = self._within(at, floor, now)
        if step is not None and step != self.last_step:
            self.last_step = step
            self.last_step_at = self._within(at if step_at is None else step_at, floor, now)

    @staticmethod
    def _within(at: float | None, floor: float, now: float) -> float:
        return now if at is None else min(now, max(at, floor))

    def restart(self, now: float) -> None:
        """The clock starts again (a job not running, or not seen: it is not hung)."""
        self.changed_at = now

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
    """What of the master's output document counts as progress: its progress, metrics, newest history point and the
    time of its newest report (any report is a sign of life)."""
    history = document.get("history") or []
    return document.get("progress"), document.get("metrics"), history[-1:], document.get(REPORTED_AT)


def report_time(document: Mapping[str, Any], now: float, wall_now: float) -> float | None:
    """When the master made the newest report of ``document`` (or of a live record), on the caller's clock: ``now``
    less the report's age on the wall clock; ``None`` when it does not say (written by an older ``tracking``).

    :param now: the caller's clock now.
    :param wall_now: seconds since the epoch now.
    """
    reported_at = document.get(REPORTED_AT)
    if isinstance(reported_at, bool) or not isinstance(reported_at, (int, float)):
        return None
    return now - max(0.0, wall_now - reported_at)


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

    Progress is a line the master printed (timed when seen, at the poll), or a change of its output document's
    progress, metrics, newest history point or report time (read at most once a second, timed from the report's
    ``reported_at``).

    :param read_document: the master's output document as text (``None``: not written yet).
    :param master_lines: how many lines the master has printed so far.
    :param clock: the caller's clock.
    :param wall_clock: seconds since the epoch, the clock of a report's ``reported_at``.
    """

    def __init__(self, timeout: float, *, read_document: Callable[[], str | None], master_lines: Callable[[], int],
                 clock: Callable[[], float] = time.monotonic, wall_clock: Callable[[], float] = time.time) -> None:
        self._read, self._lines, self._clock, self._wall_clock = read_document, master_lines, clock, wall_clock
        self.watch = ProgressWatch(timeout, clock())
        self._interval = min(1.0, timeout / 4)
        self._next = float("-inf")
        self._document: Any = None
        self._step: Any = None
        self._reported: float | None = None
        self._seen_lines: int | None = None

    def __call__(self) -> str | None:
        now = self._clock()
        if now >= self._next:
            self._next = now + self._interval
            document = parse_output_document(self._read())
            mark = document_mark(document)
            if not document.get(UNREADABLE) and mark != self._document:  # half written: the next look reads it
                self._document, self._step = mark, document_step(document)
                self._reported = report_time(document, now, self._wall_clock())
        lines = self._lines()
        # A new line is seen as it comes (the poll); a report is timed from when the master made it.
        at = now if lines != self._seen_lines else self._reported
        self._seen_lines = lines
        self.watch.observe((lines, self._document), self._step, now, at)
        return self.watch.describe(now) if self.watch.hung(now) else None


__all__ = ["HangWatchdog", "ProgressWatch", "document_mark", "document_step", "report_time"]

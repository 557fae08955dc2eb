"""The hang watchdog of a cluster job (``progress_timeout``): when to look at the master's log, and what it shows.

Pure: the waiter (the task's watch, or the trigger in deferrable mode) asks ``due(now)``, reads the master's log
with what ``query()`` says (a bounded read: ``sinceTime`` of the newest line seen, ``tailLines``,
``limitBytes``, ``timestamps``), and hands the lines to ``observe``. A line stamped after the newest seen is progress
(a live record its tracking calls print is a line too, and gives the step it reports); the clock runs only while
every replica runs, so a job still starting or waiting for capacity is never hung. ``hung(now)`` says why the job
is hung, or ``None``. A read that fails tells nothing: the clock starts again rather than stop a job it cannot see.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from datetime import datetime, timezone

from airflow_distributed.jobstate.log_cursor import parse_timestamp_ns
from airflow_distributed.jobstate.outcome import HUNG
from airflow_distributed.jobstate.progress_watch import ProgressWatch
from airflow_distributed.jobstate.verdicts import FAILURE, JobVerdict
from airflow_distributed.live_report import latest_record
from airflow_distributed.status import RUNNING

#: The longest wait between two looks at the master's log (a look costs one bounded pods/log request).
LOOK_INTERVAL = 15.0
#: Lines and bytes of one look: lines since the newest one seen, at most these (a live record is <= 16 KiB).
LOOK_LINES = 50
LOOK_BYTES = 256 * 1024
#: What a pod's main container runs to make the processes that imported ``tracking`` print their stacks: each
#: wrote its pid under ``STACKS_DIR`` (the backend sets ``contract.ENV_STACKS_DIR`` to it).
STACKS_DIR = "/tmp/airflow-distributed-stacks"
STACKS_SIGNAL = "SIGUSR1"
STACKS_COMMAND = ["/bin/sh", "-c",
                  f'n=0; for f in {STACKS_DIR}/*; do [ -e "$f" ] && kill -USR1 "${{f##*/}}" && n=$((n+1)); done; '
                  'echo "$n"']
#: Seconds the replicas get to print their stacks before their last lines are read and the job deleted.
STACKS_WAIT = 2.0
#: Replicas of a hung job whose stacks are asked for and whose last lines the message quotes, at most.
HUNG_REPLICAS = 8


class MasterLogWatch:
    """When the master of a cluster job last printed a line, and whether it has been quiet too long.

    :param timeout: ``progress_timeout`` in seconds.
    :param started_at: when the wait began, on the caller's clock.
    :param interval: seconds between looks (default: a quarter of ``timeout``, at most ``LOOK_INTERVAL``).
    """

    def __init__(self, timeout: float, started_at: float, interval: float | None = None) -> None:
        self.progress = ProgressWatch(timeout, started_at)
        self.interval = interval if interval is not None else min(LOOK_INTERVAL, timeout / 4)
        self.next_look = started_at
        #: the newest line's timestamp seen (nanoseconds since the epoch)
        self.newest_ns: int | None = None
        self.running = False
        self.looks = 0

    @property
    def timeout(self) -> float:
        return self.progress.timeout

    def due(self, now: float) -> bool:
        return now >= self.next_look

    def seconds_to_look(self, now: float) -> float:
        """Until the next look, or sooner, when the job would be hung (so that the verdict is not a look late)."""
        until = self.next_look
        hung_at = self.progress.changed_at + self.timeout
        if self.running and hung_at > now:  # once past it, the next look (a replica not running: not hung yet)
            until = min(until, hung_at)
        return max(0.0, until - now)

    def query(self) -> list[tuple[str, str]]:
        """The query of the next look's pods/log request (the generated clients have no ``sinceTime``)."""
        query = [("timestamps", "true"), ("tailLines", str(LOOK_LINES)), ("limitBytes", str(LOOK_BYTES))]
        if self.newest_ns is not None:  # whole seconds: the lines of the newest one's second come again
            query.append(("sinceTime", datetime.fromtimestamp(self.newest_ns // 10**9, timezone.utc).strftime(
                "%Y-%m-%dT%H:%M:%SZ")))
        return query

    def observe(self, lines: Iterable[str] | None, running: bool, now: float) -> None:
        """One look: the master's log lines (``timestamps=true``; ``None``: the read failed) and whether every
        replica runs."""
        self.looks += 1
        self.next_look = now + self.interval
        self.running = running
        if lines is None or not running:
            self.progress.changed_at = now  # the clock runs only while the job runs and is seen
            return
        newest, fresh = self.newest_ns, []
        for line in lines:
            stamp, _, text = line.partition(" ")
            try:
                at = parse_timestamp_ns(stamp)
            except ValueError:  # a line cut by limitBytes, or not stamped: tells nothing
                continue
            if self.newest_ns is None or at > self.newest_ns:
                fresh.append(text)
                newest = at if newest is None else max(newest, at)
        record = latest_record(fresh)
        progress = (record or {}).get("progress")
        step = progress.get("step") if isinstance(progress, dict) else None
        if step is None and record is not None:
            history = record.get("history") or []
            step = history[-1].get("step") if history and isinstance(history[-1], dict) else None
        self.newest_ns = newest
        self.progress.observe(newest, step, now)

    def hung(self, now: float) -> str | None:
        """Why the job is hung (its failure message's reason), or ``None``."""
        if not self.running or not self.progress.hung(now):
            return None
        return self.progress.describe(now)


def hung_verdict(hang: MasterLogWatch, master: str | None, still_running: Callable[[], bool],
                 now: float) -> JobVerdict | None:
    """The ``hung`` verdict of a job whose master (the pod ``master``) has been quiet past ``progress_timeout`` while
    every replica runs (``still_running()``: as the waiter sees them now, not only at the last look), else ``None``."""
    why = hang.hung(now)
    if why is None or master is None or not still_running():
        return None
    return JobVerdict(FAILURE, master, HUNG, message=why)


def all_running(states: Iterable[str]) -> bool:
    """Whether every replica runs (``status.RUNNING``), the only time the watchdog's clock runs."""
    found = list(states)
    return bool(found) and all(state == RUNNING for state in found)


__all__ = ["HUNG_REPLICAS", "LOOK_INTERVAL", "STACKS_COMMAND", "STACKS_DIR", "STACKS_SIGNAL", "STACKS_WAIT",
           "MasterLogWatch", "all_running", "hung_verdict"]

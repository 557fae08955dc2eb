"""The hang watchdog of a cluster job (``progress_timeout``): when to look at the master's log, and what it shows.

Pure: the waiter (the task's watch, or the trigger in deferrable mode) asks ``due(now)``, reads the master's log
with what ``query()`` says (a bounded read: ``sinceTime`` of the newest line seen, ``tailLines``,
``limitBytes``, ``timestamps``), and hands the lines to ``observe``. A line stamped after the newest seen is progress,
timed from its stamp; a live record its tracking calls print is a report, timed from when the master made it (its
``reported_at``: a record held back to the end of its interval is printed later), and gives the step it reports.
The clock runs only while every replica runs, so a job still starting or waiting for capacity is never hung.
``hung(now)`` says why the job is hung, or ``None``, judged at a look: one is due at the deadline, so that a record
printed since the last look is seen before the verdict. A read that fails tells nothing: the clock starts again
rather than stop a job it cannot see.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from datetime import datetime, timezone

from airflow_distributed.contract import REPORTED_AT
from airflow_distributed.jobstate.log_cursor import parse_timestamp_ns
from airflow_distributed.jobstate.outcome import Ending
from airflow_distributed.jobstate.progress_watch import ProgressWatch, document_step, report_time
from airflow_distributed.jobstate.verdicts import JobVerdict
from airflow_distributed.replica.live_report import is_record, latest_record
from airflow_distributed.status import ReplicaState

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
        #: when the last look was made (the verdict is judged as of it)
        self.looked_at = started_at
        #: the newest line's timestamp seen (nanoseconds since the epoch)
        self.newest_ns: int | None = None
        self.running = False
        self.looks = 0
        #: what the master showed: its newest line's stamp and its newest report's time (as the record says)
        self._mark: tuple[int | None, float | None] = (None, None)
        self._step: object = None
        self.progress.observe(self._mark, None, started_at)

    @property
    def timeout(self) -> float:
        return self.progress.timeout

    def _look_at(self) -> float:
        """When the next look is due: at the interval, or at the deadline when that comes first and no look was
        made at or after it (what the master printed since the last look decides, not that look)."""
        hung_at = self.progress.changed_at + self.timeout
        if self.running and self.looked_at < hung_at:
            return min(self.next_look, hung_at)
        return self.next_look

    def due(self, now: float) -> bool:
        return now >= self._look_at()

    def seconds_to_look(self, now: float) -> float:
        """Until the next look, or sooner, when the job would be hung (so that the verdict is not a look late)."""
        return max(0.0, self._look_at() - now)

    def query(self) -> list[tuple[str, str]]:
        """The query of the next look's pods/log request (the generated clients have no ``sinceTime``)."""
        query = [("timestamps", "true"), ("tailLines", str(LOOK_LINES)), ("limitBytes", str(LOOK_BYTES))]
        if self.newest_ns is not None:  # whole seconds: the lines of the newest one's second come again
            query.append(("sinceTime", datetime.fromtimestamp(self.newest_ns // 10**9, timezone.utc).strftime(
                "%Y-%m-%dT%H:%M:%SZ")))
        return query

    def observe(self, lines: Iterable[str] | None, running: bool, now: float, wall_now: float | None = None) -> None:
        """One look: the master's log lines (``timestamps=true``; ``None``: the read failed) and whether every
        replica runs.

        :param now: the caller's clock now.
        :param wall_now: seconds since the epoch now (the clock of the lines' stamps and the reports' times);
            ``None``: the caller's clock is that clock.
        """
        looked_at, self.looked_at = self.looked_at, now
        self.looks += 1
        self.next_look = now + self.interval
        self.running = running
        if lines is None or not running:
            self.progress.restart(now)  # the clock runs only while the job runs and is seen
            return
        wall = now if wall_now is None else wall_now
        fresh: list[tuple[int, str]] = []
        for line in lines:
            stamp, _, text = line.partition(" ")
            try:
                at = parse_timestamp_ns(stamp)
            except ValueError:  # a line cut by limitBytes, or not stamped: tells nothing
                continue
            if self.newest_ns is None or at > self.newest_ns:
                fresh.append((at, text))
        if not fresh:
            self.progress.observe(self._mark, self._step, now)
            return
        self.newest_ns = max(at for at, _ in fresh)

        def printed(stamp_ns: int) -> float:
            """When a line was printed, on the caller's clock: not before the last look (it was not there then)."""
            return min(now, max(looked_at, now - max(0.0, wall - stamp_ns / 1e9)))

        plain_ns, line_at = self._mark[0], None
        report_id, report_at = self._mark[1], None
        plain = []
        for at, text in reversed(fresh):
            record = latest_record([text]) if is_record(text) else None
            if record is None:  # a line (a record cut short too: printed then)
                plain.append(at)
            elif report_at is None:  # the newest record: the master's newest report seen
                self._step = document_step(record)
                # its report's age when printed (both the master's node's clock), placed at its printing here
                made = report_time(record, printed(at), at / 1e9)
                report_id, report_at = (record[REPORTED_AT], made) if made is not None else (at, printed(at))
        if plain:
            plain_ns = max(plain)
            line_at = printed(plain_ns)
        mark = (plain_ns, report_id)
        changes = [when for when in (line_at, report_at) if when is not None]
        self.progress.observe(mark, self._step, now, max(changes), report_at)
        self._mark = mark

    def hung(self, now: float) -> str | None:
        """Why the job is hung (its failure message's reason), or ``None``: quiet for ``progress_timeout`` as of the
        last look, so that nothing printed since goes unseen."""
        if not self.running or not self.progress.hung(self.looked_at):
            return None
        return self.progress.describe(now)


def hung_verdict(hang: MasterLogWatch, master: str | None, still_running: Callable[[], bool],
                 now: float) -> JobVerdict | None:
    """The ``hung`` verdict of a job whose master (the pod ``master``) has been quiet past ``progress_timeout`` while
    every replica runs (``still_running()``: as the waiter sees them now, not only at the last look), else ``None``."""
    why = hang.hung(now)
    if why is None or master is None or not still_running():
        return None
    return JobVerdict(ReplicaState.FAILED, master, Ending.HUNG, message=why)


def all_running(states: Iterable[str]) -> bool:
    """Whether every replica runs (``ReplicaState.RUNNING``), the only time the watchdog's clock runs."""
    found = list(states)
    return bool(found) and all(state == ReplicaState.RUNNING for state in found)


__all__ = ["HUNG_REPLICAS", "LOOK_INTERVAL", "STACKS_COMMAND", "STACKS_DIR", "STACKS_SIGNAL", "STACKS_WAIT",
           "MasterLogWatch", "all_running", "hung_verdict"]

"""The replica table the task log shows, and why a job waits for capacity (pure)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from airflow_distributed.jobstate.pod_state import pod_queued, waiting_reason
from airflow_distributed.status import ReplicaStatus, render_table

if TYPE_CHECKING:
    from airflow_distributed.jobstate.job_watch import JobTracker

#: Above this many replicas the table shows counts and the replicas worth a look, not every row.
TABLE_ROWS = 40




def replica_table(rows: Sequence[ReplicaStatus], limit: int = TABLE_ROWS) -> str:
    """``status.render_table`` for small jobs; for big ones, counts per state and the rows worth a look."""
    if len(rows) <= limit:
        return render_table(rows)
    counts: dict[str, int] = {}
    for row in rows:
        counts[row.state] = counts.get(row.state, 0) + 1
    summary = ", ".join(f"{count} {state}" for state, count in sorted(counts.items(), key=lambda kv: -kv[1]))
    usual = max(counts, key=lambda state: counts[state])
    notable = [row for i, row in enumerate(rows) if i == 0 or row.state != usual or row.reason]
    shown = notable[:limit]
    more = f"\n... and {len(notable) - len(shown)} more" if len(notable) > len(shown) else ""
    return f"{len(rows)} replicas: {summary}\n{render_table(shown)}{more}"


#: Seconds between two tables of a job with more than ``TABLE_ROWS`` replicas (a table per pod event would flood).
TABLE_INTERVAL = 10.0


def queue_note(tracker: JobTracker) -> str | None:
    """Why the job waits for capacity and since when, from its queued replicas' pods (``queue_note_of``); ``None``
    when no replica is queued."""
    return queue_note_of([(slot.name, tracker.pod(slot.name)) for slot in tracker.slots])


def queue_note_of(pods: Sequence[tuple[str, Mapping[str, Any] | None]]) -> str | None:
    """Why a job waits for capacity and since when, from its replicas' pods in plan order (``None``: not created):
    the scheduler's or Kueue's condition and its transition time, the cluster's own record, so that a deferral or
    a look from the job view tells the same time; ``None`` when no pod is queued."""
    queued = [(name, pod) for name, pod in pods if pod is not None and pod_queued(pod)]
    if not queued:
        return None
    first, pod = queued[0]
    condition: Mapping[str, Any] = next((c for c in (pod.get("status") or {}).get("conditions") or []
                                         if c.get("type") == "PodScheduled" and c.get("status") == "False"), {})
    since = condition.get("lastTransitionTime") or (pod.get("metadata") or {}).get("creationTimestamp") or "?"
    reason, message = waiting_reason(pod)
    others = f" (and {len(queued) - 1} more)" if len(queued) > 1 else ""
    return wait_note(f"{len(queued)} of {len(pods)} replicas wait to be scheduled", since,
                     f"{first}{others}: {reason or 'Pending'}", message)


def wait_note(what: str, since: str, reason: str, message: str | None) -> str:
    """The one form of a note on a wait for capacity: what waits, since when, and the reason and message given."""
    return f"{what} since {since}: {reason}" + (f": {message}" if message else "")


class TableReporter:
    """Hands the replicas' states to ``on_change`` when they changed, at most once every ``interval`` seconds, and
    ``queue_note`` to ``on_queue`` (when given) when it changes: why the job waits for capacity, and since when.

    :param clock: the caller's clock, in seconds.
    """

    def __init__(self, on_change: Any, clock: Any, interval: float = 0.0, on_queue: Any = None) -> None:
        self.on_change, self.clock, self.interval, self.on_queue = on_change, clock, interval, on_queue
        self.pending = False
        self.last = float("-inf")
        self._note: str | None = None

    def __call__(self, changed: bool, tracker: JobTracker) -> None:
        self.pending = self.pending or changed
        self.flush(tracker)

    def flush(self, tracker: JobTracker, force: bool = False) -> None:
        if not self.pending or self.on_change is None:
            return
        now = self.clock()
        if force or now - self.last >= self.interval:
            self.pending, self.last = False, now
            self.on_change(tracker.statuses())
            if self.on_queue is not None and (note := queue_note(tracker)) != self._note:
                self._note = note
                if note is not None:
                    self.on_queue(note)

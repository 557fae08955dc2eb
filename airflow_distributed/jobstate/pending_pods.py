"""Pods that have not started, looked at while a waiter watches something else (pure: pods in, verdict out).

A Kubeflow job's status does not tell that a replica's image cannot be pulled: its pods stay ``Pending`` and the
job stays ``Created``. So while the job waits for its replicas to start, its pods are LISTed every
``WatchTimings.pending_pods_interval`` seconds and judged by the ``kubernetes`` backend's own pull-failure verdict
(``pod_state.image_failure``): ErrImagePull/ImagePullBackOff once they have failed for ``image_pull_grace``
seconds, InvalidImageName/ErrImageNeverPull at once. Once every replica's pod exists and has started, no more
LISTs are made.

A suspended job (``runPolicy.suspend``, a TrainJob's ``spec.suspend``, e.g. waiting for Kueue to admit it) has no
pods on purpose and may stay so for hours: no LIST is made while the object says so (``on_job``). Its resume starts
the check afresh, since its replicas start again (a job suspended while running had its pods deleted).

With ``queue_timeout``, a job that waits for capacity (suspended, a pod the scheduler leaves unschedulable or
Kueue holds, or pods not created yet because the gang scheduler has not admitted the job's PodGroup) past that many
seconds from the start of the wait gets a ``queue`` verdict (``QUEUE_TIMED_OUT``); the watches are cut so that it
comes on time.

While the job waits for capacity, ``on_queue`` is handed a note on why and since when (``replica_table``'s form,
once per change, not at every LIST): the time is the cluster's own record, so that a deferral or a triggerer restart
tells the same one: the pod's ``PodScheduled=False`` condition's, the job's ``Suspended`` condition's, the
PodGroup's ``Unschedulable`` condition's; else when this waiter first saw the wait.

The waiter's watch loop asks ``due_for(object)`` (which hands the object's suspension to ``on_job``) between
watches and after each event (a resume makes a LIST due at once), makes the LIST, hands its items to ``on_pods``,
and cuts its watches to ``watch_seconds`` so that the next LIST is not late (a suspended job's watches are not cut).
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from airflow_distributed.jobstate.outcome import Ending
from airflow_distributed.jobstate.pod_state import image_failure, pod_queued, pod_started, waiting_reason
from airflow_distributed.jobstate.replica_table import queue_note_of, wait_note
from airflow_distributed.jobstate.verdicts import JobVerdict
from airflow_distributed.status import ReplicaState

#: The reason of a Kubeflow job failed by this check (its own status never says so), and how the task tells it
#: from a verdict of the Kubeflow operator: the job did not end by itself, so the task deletes it.
IMAGE_PULL_FAILED = "ImagePullFailed"
#: The same for a job that waited for capacity past ``queue_timeout``.
QUEUE_TIMED_OUT = "QueueTimedOut"
#: The same for a job the hang watchdog found hung (``progress_timeout``; ``triggers.hang_watchdog``).
JOB_HUNG = "JobHung"
#: The trigger's own verdicts, which the job's status does not show.
OWN_VERDICTS = (IMAGE_PULL_FAILED, QUEUE_TIMED_OUT, JOB_HUNG)

#: Why a suspended job waits.
SUSPENDED = "the job is suspended (waiting to be admitted, e.g. by Kueue)"


class PendingPods:
    """When to LIST a job's pods, and what a LIST says: a pull-failure verdict, or whether replicas still start.

    :param interval: seconds between two LISTs while a replica is pending.
    :param image_pull_grace: seconds a pull may keep failing (ErrImagePull, ImagePullBackOff) before the verdict.
    :param clock: the caller's clock in seconds (the first LIST is due at once).
    :param suspended_of: whether a job object of the kind says it is suspended (``kubeflow_status.job_suspended``).
    :param queue_timeout: seconds the job may wait for capacity, from now (``None``: no limit).
    :param on_queue: handed the note on why the job waits for capacity and since when, each time it changes.
    :param wall_clock: seconds since the epoch, for a wait whose start the cluster does not record.
    """

    def __init__(self, interval: float, image_pull_grace: float, clock: Callable[[], float],
                 suspended_of: Callable[[Mapping[str, Any]], bool] = lambda obj: False,
                 queue_timeout: float | None = None, on_queue: Callable[[str], None] | None = None,
                 wall_clock: Callable[[], float] = time.time) -> None:
        self.interval, self.image_pull_grace, self.clock = interval, image_pull_grace, clock
        self.suspended_of = suspended_of
        self.on_queue, self.wall_clock = on_queue, wall_clock
        #: the note last handed to ``on_queue``, and when this waiter first saw the wait of that kind
        self.note: str | None = None
        self._first_seen: tuple[str, str] | None = None
        self.queue_timeout = queue_timeout
        self.queue_deadline = None if queue_timeout is None else clock() + queue_timeout
        #: why the job waits for capacity, as last seen: (replica or ``None`` for the whole job, reason, message)
        self.queued: tuple[str | None, str, str | None] | None = None
        #: when each replica's pull was first seen failing (``image_failure`` keeps it).
        self.pull_failures: dict[str, float] = {}
        self.next_at = clock()
        self.pending = True
        self.suspended = False
        self._pull_verdict: JobVerdict | None = None
        #: LISTs made, for logs and tests.
        self.lists = 0

    def on_job(self, suspended: bool, since: str | None = None) -> None:
        """Whether the job is suspended, as its object last said (``since``: its ``Suspended`` condition's time). A
        resume makes a LIST due at once: the replicas start again, and the pulls are to be watched again."""
        if suspended == self.suspended:
            return
        self.suspended = suspended
        self.queued = (None, "Suspended", SUSPENDED) if suspended else None
        if suspended:
            self.pull_failures.clear()  # the pods are gone; a pull failing before does not count after
            self._tell(wait_note("the job waits to be admitted (suspended)", self._since("Suspended", since),
                                 "Suspended", SUSPENDED))
        else:
            self.pending, self.next_at = True, self.clock()
            self._tell(None)

    def _since(self, kind: str, recorded: str | None) -> str:
        """The cluster's record of when a wait began, else when this waiter first saw a wait of this kind."""
        if recorded:
            return recorded
        if self._first_seen is None or self._first_seen[0] != kind:
            self._first_seen = (kind, time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(self.wall_clock())))
        return self._first_seen[1]

    def _tell(self, note: str | None) -> None:
        """Hands a changed note to ``on_queue`` (none when the wait ends: the replica table tells what follows)."""
        if note == self.note:
            return
        self.note = note
        if note is None:
            self._first_seen = None
        elif self.on_queue is not None:
            self.on_queue(note)

    @property
    def verdict(self) -> JobVerdict | None:
        """A replica's image that cannot be pulled, or the job waiting for capacity past ``queue_timeout``."""
        if self._pull_verdict is not None:
            return self._pull_verdict
        if self.queued is not None and self.queue_deadline is not None and self.clock() >= self.queue_deadline:
            replica, reason, message = self.queued
            return JobVerdict(ReplicaState.FAILED, replica, Ending.QUEUED, None, reason, message)
        return None

    def seconds_to_queue_deadline(self) -> float | None:
        """Until the queue verdict, while the job waits for capacity (``None``: not waiting, or no limit)."""
        if self.queued is None or self.queue_deadline is None:
            return None
        return max(0.0, self.queue_deadline - self.clock())

    def due(self) -> bool:
        return self.pending and not self.suspended and self.verdict is None and self.clock() >= self.next_at

    def due_for(self, obj: Mapping[str, Any] | None) -> bool:
        """Whether a LIST is due, the job object being ``obj`` as last seen (``None``: not seen yet, no LIST)."""
        if obj is None:
            return False
        self.on_job(self.suspended_of(obj), condition_since(obj, "Suspended"))
        return self.due()

    def watch_seconds(self, longest: int) -> int:
        """``timeoutSeconds`` of the next watch: it ends by the next LIST while a replica is pending (a suspended
        job's watch is not cut: its resume comes as an event)."""
        queue = self.seconds_to_queue_deadline()
        if queue is not None:
            longest = max(1, min(longest, math.ceil(queue)))
        if not self.pending or self.suspended or self.verdict is not None:
            return longest
        return max(1, min(longest, math.ceil(self.next_at - self.clock())))

    def on_pods(self, pods: Sequence[Mapping[str, Any]], expected: int | None,
                pod_group: Mapping[str, Any] | None = None) -> JobVerdict | None:
        """A LIST's items (the job's pods, ``expected`` of them when all exist): the verdict, if the pods give one.

        :param pod_group: the job's PodGroup as read after the LIST, when pods were missing (``pods_missing``): one
            its gang scheduler has not admitted yet makes the job queued while no pod is.
        """
        now = self.clock()
        self.lists += 1
        named = sorted(((str(pod["metadata"]["name"]), pod) for pod in pods), key=lambda item: item[0])
        self._pull_verdict = image_failure(named, self.pull_failures, self.image_pull_grace, now)
        self.pending = expected is None or len(named) < expected or not all(pod_started(pod) for _, pod in named)
        if not self.suspended:
            self.queued = next(((name, *queue_reason(pod)) for name, pod in named if pod_queued(pod)), None)
            waiting = pod_group_waiting(pod_group) if pods_missing(pods, expected) else None
            if self.queued is None and waiting is not None:
                self.queued = (None, *waiting)
            self._tell(self._queue_note(named, expected, pod_group if waiting is not None else None))
        # A failing pull is looked at again when its grace ends, not one interval later.
        ends = [since + self.image_pull_grace for since in self.pull_failures.values()]
        self.next_at = min([now + self.interval, *ends])
        return self.verdict

    def _queue_note(self, named: Sequence[tuple[str, Mapping[str, Any]]], expected: int | None,
                    pod_group: Mapping[str, Any] | None) -> str | None:
        """Why the job waits and since when, as ``on_pods`` found it (``queued``), or ``None`` when it does not."""
        if self.queued is None:
            return None
        if self.queued[0] is not None:  # a pod waits: the kubernetes backend's own note on its replicas
            missing: list[tuple[str, Mapping[str, Any] | None]] = [("", None)] * max(0, (expected or 0) - len(named))
            return queue_note_of([*named, *missing])
        _, reason, message = self.queued
        return wait_note("the job waits for its PodGroup to be admitted",
                         self._since("PodGroup", condition_since(pod_group or {}, "Unschedulable")), reason, message)


def pods_missing(pods: Sequence[Any], expected: int | None) -> bool:
    """Fewer pods than the job asks for exist (its controller has not made them all yet)."""
    return expected is not None and len(pods) < expected


def pod_group_waiting(group: Mapping[str, Any] | None) -> tuple[str, str] | None:
    """Why a PodGroup not admitted yet keeps its job waiting: its ``Unschedulable`` condition's reason and message
    (Volcano's, e.g. ``NotEnoughResources``), else its phase; ``None`` when there is no group or it is admitted
    (Volcano's ``Inqueue``, ``Running``...; scheduler-plugins' ``Scheduling``...)."""
    if not group:
        return None
    status = group.get("status") or {}
    if status.get("phase") not in (None, "", "Pending"):
        return None
    name = (group.get("metadata") or {}).get("name")
    for condition in status.get("conditions") or []:
        if isinstance(condition, Mapping) and condition.get("type") == "Unschedulable" and \
                condition.get("status") == "True":
            return (str(condition.get("reason") or "Unschedulable"),
                    f"PodGroup {name} is not admitted: {condition.get('message') or 'unschedulable'}")
    return "PodGroupPending", f"PodGroup {name} is not admitted yet (phase {status.get('phase') or 'Pending'})"


def condition_since(obj: Mapping[str, Any], kind: str) -> str | None:
    """When the object's condition ``kind`` turned ``True`` (its ``lastTransitionTime``), if it is and says so."""
    for condition in (obj.get("status") or {}).get("conditions") or []:
        if isinstance(condition, Mapping) and condition.get("type") == kind and condition.get("status") == "True":
            return str(condition.get("lastTransitionTime") or "") or None
    return None


def queue_reason(pod: Mapping[str, Any]) -> tuple[str, str | None]:
    """Why a queued pod waits: the scheduler's (or Kueue's gate's) reason and message."""
    reason, message = waiting_reason(pod)
    return reason or "Unschedulable", message


__all__ = ["IMAGE_PULL_FAILED", "JOB_HUNG", "OWN_VERDICTS", "QUEUE_TIMED_OUT", "PendingPods", "condition_since",
           "pod_group_waiting",
           "pods_missing", "queue_reason"]

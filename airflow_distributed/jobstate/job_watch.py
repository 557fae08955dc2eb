"""The state of one job's pods, from a LIST and the events of one watch: a status per replica and a verdict
(``JobTracker``; pure). One pod is read by ``pod_state``, the slots and the verdict are ``verdicts``, the watch
protocol ``watch_stream``, log cursors ``log_cursor``, the table ``replica_table``.

Pure: values in, values out; pods are the API server's JSON (camelCase dicts), so the sync hook and the
async trigger feed it the same way. Times are the caller's clock, passed in.

Rules (CONTRACT.md: "Any replica exiting non-zero fails the job at once"):

- the job succeeds when the master's ``base`` container has terminated with exit code 0. The master pod stays
  Running after that (the XCom sidecar), so the pod phase is not what decides;
- it fails the moment any replica's ``base`` (or its readiness step) terminates non-zero, its pod fails
  without one (evicted, deadline), it is deleted, or it cannot start: an image whose pull failed
  (ErrImagePull, ImagePullBackOff) at once, or once it has failed for ``image_pull_grace`` seconds; an image
  that can never be pulled (InvalidImageName, ErrImageNeverPull) at once; anything else (Unschedulable,
  CreateContainerConfigError, a readiness step still waiting for its peers, ...) once ``startup_timeout`` is
  over;
- a replica the cluster is taking away (its pod being deleted or evicted: ``disruption.pod_disruption``) is the
  cause whatever its exit code, and also when a peer fails while it goes (the peer lost its connection to it).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

from airflow_distributed.jobstate.disruption import pod_disruption
from airflow_distributed.jobstate.outcome import Ending
from airflow_distributed.jobstate.pod_state import (
    ReplicaExit,
    container_exit,
    deciding_exit,
    image_failure,
    pod_queued,
    replica_status,
    startup_wait,
    training_started,
    waiting_reason,
)
from airflow_distributed.jobstate.verdicts import JobVerdict, ReplicaSlot
from airflow_distributed.jobstate.watch_stream import ResumableWatch
from airflow_distributed.manifests.pod_names import MAIN_CONTAINER
from airflow_distributed.status import ReplicaState, ReplicaStatus


class JobTracker:
    """The latest pod of every slot and what they add up to.

    :param slots: the replicas the job has, master first.
    :param startup_timeout: seconds a replica may take to start, counted from ``started_at``.
    :param started_at: when the wait began, on the caller's clock.
    :param image_pull_grace: seconds a replica's image pull may keep failing (ErrImagePull, ImagePullBackOff)
        before the job fails; 0 fails at the first failed pull. A pull that succeeds in time resets it.
    :param pull_failures: when each replica's pull was first seen failing, on the caller's clock; a waiter that
        builds a new tracker per look (a sensor's pokes) hands the same mapping to every one of them.
    :param queue_timeout: seconds the replicas may wait to be scheduled (no capacity or quota: unschedulable, held
        by Kueue), counted from ``started_at``; ``startup_timeout`` then counts from when the last was scheduled.
        ``None``: no queue limit of its own, ``startup_timeout`` covers the wait for scheduling too.
    """

    def __init__(self, slots: Sequence[ReplicaSlot], *, startup_timeout: float, started_at: float,
                 image_pull_grace: float = 0.0, pull_failures: dict[str, float] | None = None,
                 queue_timeout: float | None = None) -> None:
        if not slots:
            raise ValueError("a job has at least one replica")
        self.slots = tuple(slots)
        self._by_name = {slot.name: slot for slot in self.slots}
        self.startup_timeout = startup_timeout
        self.started_at = started_at
        self.image_pull_grace = image_pull_grace
        self.queue_timeout = queue_timeout
        #: when the last replica was scheduled (with ``queue_timeout``), on the caller's clock
        self.scheduled_at: float | None = None
        self.pull_failures = {} if pull_failures is None else pull_failures
        self._pods: dict[str, dict[str, Any]] = {}
        self._deleted: set[str] = set()
        #: how the cluster took each replica's pod away, as last seen (its DELETED event may carry it alone)
        self._disruptions: dict[str, str] = {}
        self._failure: JobVerdict | None = None

    @property
    def master(self) -> ReplicaSlot:
        return self.slots[0]

    def pod(self, name: str) -> dict[str, Any] | None:
        return self._pods.get(name)

    def last_pods(self) -> dict[str, dict[str, Any]]:
        """The last pod seen of each replica that has one, by replica (a copy: the tracker goes on)."""
        return dict(self._pods)

    def missing(self) -> list[str]:
        """Slots with no pod (never created, or deleted)."""
        return [slot.name for slot in self.slots if slot.name not in self._pods]

    def reset(self, pods: Iterable[Mapping[str, Any]]) -> bool:
        """Replace everything with a LIST's items; a pod that was known and is not listed was deleted."""
        before = self.statuses()
        listed = {p["metadata"]["name"]: dict(p) for p in pods if p["metadata"]["name"] in self._by_name}
        self._deleted |= set(self._pods) - set(listed)
        self._pods = listed
        self._deleted -= set(listed)
        for name, pod in listed.items():
            self._note_disruption(name, pod)
        return self.statuses() != before

    def _note_disruption(self, name: str, pod: Mapping[str, Any], *, deleted: bool = False) -> None:
        disruption = pod_disruption(pod)
        if disruption is not None:
            self._disruptions[name] = disruption
        elif not deleted:  # a pod of this name that nobody disrupts (an elastic job's recreated replica)
            self._disruptions.pop(name, None)

    def disruption(self, name: str) -> str | None:
        """How the cluster took replica ``name``'s pod away, if it did."""
        return self._disruptions.get(name)

    def apply(self, event_type: str, pod: Mapping[str, Any]) -> bool:
        """One watch event (ADDED / MODIFIED / DELETED); returns whether any row of the table changed."""
        name = (pod.get("metadata") or {}).get("name")
        if name not in self._by_name:
            return False
        before = self.statuses_of(name)
        self._note_disruption(name, pod, deleted=event_type == "DELETED")
        if event_type == "DELETED":
            self._pods.pop(name, None)
            self._deleted.add(name)
            # A pod that exited keeps its last status in the table; the verdict was taken before.
            if container_exit(pod) is not None:
                self._pods[name] = dict(pod)
        else:
            self._pods[name] = dict(pod)
            self._deleted.discard(name)
        return self.statuses_of(name) != before

    def statuses_of(self, name: str) -> ReplicaStatus:
        return replica_status(self._by_name[name], self._pods.get(name), deleted=name in self._deleted)

    def statuses(self) -> tuple[ReplicaStatus, ...]:
        return tuple(replica_status(s, self._pods.get(s.name), deleted=s.name in self._deleted) for s in self.slots)

    def verdict(self, now: float) -> JobVerdict | None:
        """The job's outcome as of ``now``, or ``None`` while it runs. A failure, once seen, stays."""
        if self._failure is not None:
            return self._failure
        master = self._pods.get(self.master.name)
        if master is not None:
            exited = container_exit(master)
            if exited is not None and exited[0] == MAIN_CONTAINER and exited[1].get("exitCode") == 0:
                return JobVerdict(ReplicaState.SUCCEEDED, self.master.name)
        self._failure = self._first_failure(now)
        return self._failure

    def _first_failure(self, now: float) -> JobVerdict | None:
        exits = []
        for slot in self.slots:
            pod = self._pods.get(slot.name)
            if pod is None:
                continue
            exited = container_exit(pod)
            if exited is not None and exited[1].get("exitCode") not in (None, 0):
                exits.append(ReplicaExit(slot.name, exited[0], exited[1], self.disruption(slot.name)))
        found = deciding_exit(exits)
        if found is not None and found.disruption is None:
            # A peer being taken away as this one fails (its pod deleted or evicted, its SIGTERM not yet reported as
            # an exit) is the cause: this one lost its connection to it.
            exited_names = {each.replica for each in exits}
            taken = next((slot.name for slot in self.slots
                          if slot.name in self._disruptions and slot.name not in exited_names), None)
            if taken is not None:
                return JobVerdict(ReplicaState.FAILED, taken, Ending.DELETED, disruption=self._disruptions[taken])
        if found is not None:
            fields = found.state
            return JobVerdict(ReplicaState.FAILED, found.replica, Ending.EXITED, fields.get("exitCode"),
                              fields.get("reason"), fields.get("message"), found.container, disruption=found.disruption)
        for slot in self.slots:
            pod = self._pods.get(slot.name)
            if slot.name in self._deleted and (pod is None or container_exit(pod) is None):
                return JobVerdict(ReplicaState.FAILED, slot.name, Ending.DELETED, disruption=self.disruption(slot.name))
            if pod is None:
                continue
            status = pod.get("status") or {}
            if status.get("phase") == "Failed" and container_exit(pod) is None:
                return JobVerdict(ReplicaState.FAILED, slot.name, Ending.POD_FAILED, None,
                                  status.get("reason") or "Failed", status.get("message"),
                                  disruption=self.disruption(slot.name))
        image = self._image_failure(now)
        if image is not None:
            return image
        if self.queue_timeout is not None:
            queued = self.queued()
            if queued:  # waiting for capacity is not starting: the queue limit applies, not the startup one
                self.scheduled_at = None
                if now < self.started_at + self.queue_timeout:
                    return None
                reason, message = waiting_reason(self._pods[queued[0]])
                return JobVerdict(ReplicaState.FAILED, queued[0], Ending.QUEUED, None, reason or "Unschedulable",
                                  message)
            if self.scheduled_at is None:
                self.scheduled_at = now
        if now < self.startup_deadline:
            return None
        for slot in self.slots:
            pod = self._pods.get(slot.name)
            if pod is None:
                return JobVerdict(ReplicaState.FAILED, slot.name, Ending.NOT_STARTED, None, "NotCreated",
                                  "the pod does not exist")
            if not training_started(pod):
                reason, message = startup_wait(pod)
                return JobVerdict(ReplicaState.FAILED, slot.name, Ending.NOT_STARTED, None, reason or "Pending",
                                  message)
        return None

    def _image_failure(self, now: float) -> JobVerdict | None:
        return image_failure([(slot.name, self._pods.get(slot.name)) for slot in self.slots], self.pull_failures,
                             self.image_pull_grace, now)

    def queued(self) -> list[str]:
        """Replicas whose pod is not started and not scheduled to a node (unschedulable, gated by Kueue)."""
        return [slot.name for slot in self.slots if (pod := self._pods.get(slot.name)) is not None and pod_queued(pod)]

    @property
    def startup_deadline(self) -> float:
        """The next deadline of a job not started: the queue limit while a replica waits to be scheduled, else the
        startup limit (from the start, or from when the last replica was scheduled with ``queue_timeout``)."""
        if self.queue_timeout is None:
            return self.started_at + self.startup_timeout
        if self.scheduled_at is None:
            return self.started_at + self.queue_timeout
        return self.scheduled_at + self.startup_timeout

    def waiting_for_start(self) -> bool:
        return any(slot.name not in self._pods or not training_started(self._pods[slot.name]) for slot in self.slots)

    def seconds_to_deadline(self, now: float) -> float | None:
        """Until the next deadline (startup, or the end of a failing pull's grace) while some replica has not
        started; ``None`` when none is waiting."""
        if not self.waiting_for_start():
            return None
        deadlines = [self.startup_deadline, *(since + self.image_pull_grace for since in self.pull_failures.values())]
        return max(0.0, min(deadlines) - now)


class JobWatch(ResumableWatch):
    """A job's pods: the tracker's table from a LIST and the events of one label-selector watch."""

    def __init__(self, tracker: JobTracker, keep: Callable[[Mapping[str, Any]], Mapping[str, Any]] | None = None
                 ) -> None:
        """:param keep: what of each pod the tracker keeps (e.g. ``pod_essentials``); the whole pod by default."""
        super().__init__()
        self.tracker = tracker
        self.keep = keep

    def on_list(self, body: Mapping[str, Any]) -> bool:
        self._list_version(body)
        items = body.get("items") or []
        return self.tracker.reset(items if self.keep is None else [self.keep(pod) for pod in items])

    def on_line(self, line: str | bytes) -> bool:
        """One line of the watch stream; returns whether the table changed (see ``ResumableWatch._event``)."""
        event = self._event(line)
        if event is None:
            return False
        kind, pod = event
        return self.tracker.apply(kind, pod if self.keep is None else self.keep(pod))

    def watch_seconds(self, now: float, longest: int) -> int:
        """``timeoutSeconds`` for the next watch request: never past the startup deadline (an integer >= 1)."""
        left = self.tracker.seconds_to_deadline(now)
        if left is None:
            return max(1, int(longest))
        return max(1, min(int(longest), math.ceil(left)))

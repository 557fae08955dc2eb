"""The state of one job's pods, from a LIST and the events of one watch: a status per replica and a verdict.

Pure: values in, values out; pods are the API server's JSON (camelCase dicts), so the sync hook and the
async trigger feed it the same way. Times are the caller's clock, passed in.

Rules (CONTRACT.md: "Any replica exiting non-zero fails the job at once"):

- the job succeeds when the master's ``base`` container has terminated with exit code 0. The master pod stays
  Running after that (the XCom sidecar), so the pod phase is not what decides;
- it fails the moment any replica's ``base`` (or its readiness step) terminates non-zero, its pod fails
  without one (evicted, deadline), it is deleted, or it cannot start: an image whose pull failed
  (ErrImagePull, ImagePullBackOff) at once, or once it has failed for ``image_pull_grace`` seconds; an image
  that can never be pulled (InvalidImageName, ErrImageNeverPull) at once; anything else (Unschedulable,
  CreateContainerConfigError, ...) once ``startup_timeout`` is over.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass
from datetime import datetime, timezone
from typing import Any

from airflow_distributed.jobstate import outcome as ending
from airflow_distributed.jobstate.outcome import JobOutcome, describe
from airflow_distributed.manifests.pod_names import MAIN_CONTAINER, READINESS_CONTAINER, RESTARTS_ANNOTATION
from airflow_distributed.status import FAILED, PENDING, RUNNING, STOPPED, SUCCEEDED, ReplicaStatus, render_table

SUCCESS, FAILURE = "succeeded", "failed"
# Waiting reasons that no amount of waiting fixes: fail at once instead of at the end of startup_timeout, whatever
# the grace. The kubelet never retries an image reference it cannot parse, nor a pull that imagePullPolicy Never
# forbids. CreateContainerConfigError is not among them: it means a Secret/ConfigMap (or key) the pod refers to
# is missing, and the kubelet starts the container as soon as it appears (another task may be creating it), so it
# is judged by startup_timeout like a pod that cannot be scheduled.
PERMANENT_WAITING_REASONS = frozenset({"InvalidImageName", "ErrImageNeverPull"})
# A pull that failed: the kubelet retries with back-off, and a registry that flaps may serve the next pull, but a
# missing tag or a refused credential never recovers. Fail at once unless the operator grants a grace period.
PULL_FAILURE_REASONS = frozenset({"ErrImagePull", "ImagePullBackOff"})
# A pod's own reason when the node or the scheduler took it away: evicted (node pressure), preempted, its node lost
# or shut down (graceful node shutdown says ``Terminated``, older releases ``Shutdown``/``NodeShutdown``).
LOST_POD_REASONS = frozenset({"Evicted", "Preempting", "NodeLost", "NodeShutdown", "Shutdown", "Terminated"})
# Waiting reasons that only say "starting", not why a pod is stuck.
_STARTING_REASONS = frozenset({"ContainerCreating", "PodInitializing"})
#: Above this many replicas the table shows counts and the replicas worth a look, not every row.
TABLE_ROWS = 40


@dataclass(frozen=True)
class ReplicaSlot:
    """A replica the job should have, whether or not its pod exists yet."""

    name: str
    role: str
    index: int
    is_master: bool = False


def replica_slots(plan: Any) -> tuple[ReplicaSlot, ...]:
    """The slots of a ``ClusterPlan``, master first."""
    return tuple(ReplicaSlot(r.name, r.role, r.index, r.is_master) for r in plan.replicas)


def slots_to_json(slots: Sequence[ReplicaSlot]) -> list[list[Any]]:
    """Compact (a trigger's kwargs carry it): ``[[name, role, index], ...]``, the master first."""
    return [[s.name, s.role, s.index] for s in slots]


def slots_from_json(data: Sequence[Sequence[Any]]) -> tuple[ReplicaSlot, ...]:
    return tuple(ReplicaSlot(str(name), str(role), int(index), i == 0) for i, (name, role, index) in enumerate(data))


@dataclass(frozen=True)
class JobVerdict:
    """How a job ended: ``state`` is ``succeeded`` or ``failed``; a failure names the replica and why.

    ``cause`` is ``exit`` (a container exited non-zero), ``pod`` (the pod failed without an exit code),
    ``deleted``, ``image`` (its image cannot be pulled; ``image`` names it), ``startup`` (it did not start within
    the startup timeout) or ``stopped`` (the task was killed). ``disruption`` says how the cluster took the replica
    away, when it did (``pod_disruption``).
    """

    state: str
    replica: str | None = None
    cause: str | None = None
    exit_code: int | None = None
    reason: str | None = None
    message: str | None = None
    container: str | None = None
    image: str | None = None
    disruption: str | None = None

    @property
    def succeeded(self) -> bool:
        return self.state == SUCCESS

    def as_dict(self) -> dict[str, Any]:
        return {k: v for k, v in asdict(self).items() if v is not None}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> JobVerdict:
        return cls(**{k: data[k] for k in cls.__dataclass_fields__ if k in data})

    def outcome(self, replicas: Sequence[ReplicaStatus] = (), **found: Any) -> JobOutcome:
        """The ``JobOutcome`` of this verdict, with the replicas' last statuses and what else was found (``tail``,
        ``events``, ``logs``, ``pods``...)."""
        how = ending.SUCCEEDED if self.succeeded else (self.cause or ending.FAILED)
        return JobOutcome(how, tuple(replicas), self.replica, self.exit_code, self.reason, self.message,
                          self.container, self.image, disruption=self.disruption, **found)

    def describe(self, startup_timeout: float | None = None) -> str:
        """One line for the failure message, without the job name (``outcome.describe``)."""
        return describe(self.outcome(), startup_timeout)


# ------------------------------------------------------------------------------------------ one pod


def container_status(pod: Mapping[str, Any], name: str) -> Mapping[str, Any] | None:
    status = pod.get("status") or {}
    for entry in (status.get("containerStatuses") or []) + (status.get("initContainerStatuses") or []):
        if entry.get("name") == name:
            return entry
    return None


def container_state(pod: Mapping[str, Any], name: str) -> tuple[str | None, Mapping[str, Any]]:
    """(``running`` | ``terminated`` | ``waiting`` | ``None``, the state's fields) of one container."""
    entry = container_status(pod, name) or {}
    state = entry.get("state") or {}
    for key in ("terminated", "running", "waiting"):
        if state.get(key) is not None:
            return key, state[key]
    return None, {}


def termination_message(pod: Mapping[str, Any], container: str = MAIN_CONTAINER) -> str | None:
    kind, fields = container_state(pod, container)
    return fields.get("message") if kind == "terminated" else None


def log_available(pod: Mapping[str, Any] | None, container: str = MAIN_CONTAINER) -> bool:
    """The API answers a container's log only once it has started (running or terminated)."""
    return pod is not None and container_state(pod, container)[0] in ("running", "terminated")


def pod_disruption(pod: Mapping[str, Any] | None) -> str | None:
    """How the cluster is taking this pod away, if it is: the reason of its ``DisruptionTarget`` condition (set
    before an eviction, a preemption, a taint's or the pod GC's deletion of a lost node's pods), else its own
    reason when that is one of ``LOST_POD_REASONS``; ``None`` for a pod nobody disrupted."""
    status = (pod or {}).get("status") or {}
    for condition in status.get("conditions") or []:
        if condition.get("type") == "DisruptionTarget" and condition.get("status") == "True":
            return condition.get("reason") or "DisruptionTarget"
    reason = status.get("reason")
    return reason if reason in LOST_POD_REASONS else None


def pod_started(pod: Mapping[str, Any]) -> bool:
    """Past scheduling and image pulls: some container (the readiness step counts) runs or has run."""
    if (pod.get("status") or {}).get("phase") in ("Running", "Succeeded", "Failed"):
        return True
    status = pod.get("status") or {}
    for entry in (status.get("initContainerStatuses") or []) + (status.get("containerStatuses") or []):
        state = entry.get("state") or {}
        if state.get("running") is not None or state.get("terminated") is not None:
            return True
    return False


def _image_problem(pod: Mapping[str, Any]) -> tuple[str, str | None, str] | None:
    """(reason, kubelet's message, image) of a container whose image cannot be pulled, if one is waiting so."""
    status = pod.get("status") or {}
    images = {c.get("name"): c.get("image") for c in ((pod.get("spec") or {}).get("initContainers") or [])
              + ((pod.get("spec") or {}).get("containers") or [])}
    for entry in (status.get("initContainerStatuses") or []) + (status.get("containerStatuses") or []):
        waiting = (entry.get("state") or {}).get("waiting") or {}
        reason = waiting.get("reason")
        if reason in PULL_FAILURE_REASONS or reason in PERMANENT_WAITING_REASONS:
            return reason, waiting.get("message"), images.get(entry.get("name")) or entry.get("image") or "?"
    return None


def image_failure(pods: Iterable[tuple[str, Mapping[str, Any] | None]], pull_failures: dict[str, float],
                  grace: float, now: float) -> JobVerdict | None:
    """The first replica whose image can never be pulled, or whose pull has failed for ``grace`` seconds or more.

    The one pull-failure verdict of every backend (the ``kubernetes`` tracker's, the ``kubeflow`` wait's).

    :param pods: (replica, its pod or ``None``), in the order replicas are named in a verdict.
    :param pull_failures: when each replica's pull was first seen failing, on the caller's clock; kept up to date
        here (a replica whose pull is no longer failing is forgotten).
    """
    pods = list(pods)
    failing = {}
    for name, pod in pods:
        problem = None if pod is None or pod_started(pod) else _image_problem(pod)
        if problem is not None:
            failing[name] = problem
    for name in list(pull_failures):
        if name not in failing:
            del pull_failures[name]
    for name, _ in pods:
        if name not in failing:
            continue
        reason, message, image = failing[name]
        since = pull_failures.setdefault(name, now)
        if reason in PERMANENT_WAITING_REASONS or now - since >= grace:
            return JobVerdict(FAILURE, name, "image", None, reason, message, image=image)
    return None


def pod_essentials(pod: Mapping[str, Any]) -> dict[str, Any]:
    """What a verdict and the table read of a pod: its name, node, containers' names and images, and status.

    A pod of a big job is tens of KB of JSON, most of it its spec (every replica's address in the environment);
    a waiter holding many jobs (one triggerer, a thousand deferred jobs) keeps this instead.
    """
    metadata, spec = pod.get("metadata") or {}, pod.get("spec") or {}
    kept: dict[str, Any] = {"metadata": {"name": metadata.get("name"), "uid": metadata.get("uid")}, "spec": {}}
    if spec.get("nodeName"):
        kept["spec"]["nodeName"] = spec["nodeName"]
    for key in ("initContainers", "containers"):
        if spec.get(key):
            kept["spec"][key] = [{"name": c.get("name"), "image": c.get("image")} for c in spec[key]]
    if pod.get("status") is not None:
        kept["status"] = pod["status"]
    return kept


def _waiting(pod: Mapping[str, Any]) -> tuple[str | None, str | None]:
    """Why a pod is not running yet: a container's waiting reason, else the scheduler's, else the pod's."""
    status = pod.get("status") or {}
    for entry in (status.get("initContainerStatuses") or []) + (status.get("containerStatuses") or []):
        waiting = (entry.get("state") or {}).get("waiting") or {}
        if waiting.get("reason") and waiting["reason"] not in _STARTING_REASONS:
            return waiting["reason"], waiting.get("message")
    for condition in status.get("conditions") or []:
        if condition.get("type") == "PodScheduled" and condition.get("status") == "False":
            return condition.get("reason") or "Unschedulable", condition.get("message")
    if status.get("reason"):
        return status["reason"], status.get("message")
    return None, None


def waiting_reason(pod: Mapping[str, Any]) -> tuple[str | None, str | None]:
    """Why a pod is not running yet (``_waiting``), for waiters outside this module."""
    return _waiting(pod)


def pod_queued(pod: Mapping[str, Any]) -> bool:
    """Not started and not scheduled to a node: waiting for capacity (unschedulable, gated by Kueue)."""
    return not pod_started(pod) and not _scheduled(pod)


def _scheduled(pod: Mapping[str, Any]) -> bool:
    """The pod is bound to a node, and the scheduler does not say otherwise."""
    conditions = (pod.get("status") or {}).get("conditions") or []
    if any(c.get("type") == "PodScheduled" and c.get("status") == "False" for c in conditions):
        return False
    return bool((pod.get("spec") or {}).get("nodeName"))


def _exit(pod: Mapping[str, Any]) -> tuple[str, Mapping[str, Any]] | None:
    """(container, terminated state) of the container whose exit decides this replica, if one has exited."""
    kind, fields = container_state(pod, READINESS_CONTAINER)
    if kind == "terminated" and fields.get("exitCode") not in (None, 0):
        return READINESS_CONTAINER, fields
    kind, fields = container_state(pod, MAIN_CONTAINER)
    if kind == "terminated":
        return MAIN_CONTAINER, fields
    return None


def recreated(pod: Mapping[str, Any]) -> int:
    """How often the task recreated this replica's pod (an elastic job's lost replica), from its annotation."""
    value = ((pod.get("metadata") or {}).get("annotations") or {}).get(RESTARTS_ANNOTATION, "0")
    return int(value) if str(value).isdigit() else 0


def replica_status(slot: ReplicaSlot, pod: Mapping[str, Any] | None, *, deleted: bool = False) -> ReplicaStatus:
    """A slot's row of the table, from its pod (``None``: not created yet)."""
    if pod is None:
        return ReplicaStatus(slot.name, slot.role, slot.index, STOPPED if deleted else PENDING)
    where = (pod.get("spec") or {}).get("nodeName") or ""
    entry = container_status(pod, MAIN_CONTAINER) or {}
    restarts = int(entry.get("restartCount") or 0) + recreated(pod)
    exited = _exit(pod)
    if exited is not None:
        _, fields = exited
        code = fields.get("exitCode")
        state = SUCCEEDED if code == 0 else FAILED
        reason = fields.get("reason") if code != 0 else None
        return ReplicaStatus(slot.name, slot.role, slot.index, state, code, where, restarts, reason)
    if deleted:
        return ReplicaStatus(slot.name, slot.role, slot.index, STOPPED, None, where, restarts)
    phase = (pod.get("status") or {}).get("phase")
    if phase == "Failed":
        reason, _ = _waiting(pod)
        return ReplicaStatus(slot.name, slot.role, slot.index, FAILED, None, where, restarts, reason)
    if container_state(pod, MAIN_CONTAINER)[0] == "running":
        return ReplicaStatus(slot.name, slot.role, slot.index, RUNNING, None, where, restarts)
    reason, _ = _waiting(pod)
    return ReplicaStatus(slot.name, slot.role, slot.index, PENDING, None, where, restarts, reason)


# ------------------------------------------------------------------------------------------ a job


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
            if _exit(pod) is not None:
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
            exited = _exit(master)
            if exited is not None and exited[0] == MAIN_CONTAINER and exited[1].get("exitCode") == 0:
                return JobVerdict(SUCCESS, self.master.name)
        self._failure = self._first_failure(now)
        return self._failure

    def _first_failure(self, now: float) -> JobVerdict | None:
        exits = []
        for slot in self.slots:
            pod = self._pods.get(slot.name)
            if pod is None:
                continue
            exited = _exit(pod)
            if exited is not None and exited[1].get("exitCode") not in (None, 0):
                exits.append((str(exited[1].get("finishedAt") or ""), slot, exited))
        if exits:
            # Several replicas fail within moments of each other (peers lose their connection): the first is the cause.
            _, slot, (container, fields) = min(exits, key=lambda item: item[0])
            return JobVerdict(FAILURE, slot.name, "exit", fields.get("exitCode"), fields.get("reason"),
                              fields.get("message"), container, disruption=self.disruption(slot.name))
        for slot in self.slots:
            pod = self._pods.get(slot.name)
            if slot.name in self._deleted and (pod is None or _exit(pod) is None):
                return JobVerdict(FAILURE, slot.name, "deleted", disruption=self.disruption(slot.name))
            if pod is None:
                continue
            status = pod.get("status") or {}
            if status.get("phase") == "Failed" and _exit(pod) is None:
                return JobVerdict(FAILURE, slot.name, "pod", None, status.get("reason") or "Failed",
                                  status.get("message"), disruption=self.disruption(slot.name))
        image = self._image_failure(now)
        if image is not None:
            return image
        if self.queue_timeout is not None:
            queued = self.queued()
            if queued:  # waiting for capacity is not starting: the queue limit applies, not the startup one
                self.scheduled_at = None
                if now < self.started_at + self.queue_timeout:
                    return None
                reason, message = _waiting(self._pods[queued[0]])
                return JobVerdict(FAILURE, queued[0], "queue", None, reason or "Unschedulable", message)
            if self.scheduled_at is None:
                self.scheduled_at = now
        if now < self.startup_deadline:
            return None
        for slot in self.slots:
            pod = self._pods.get(slot.name)
            if pod is None:
                return JobVerdict(FAILURE, slot.name, "startup", None, "NotCreated", "the pod does not exist")
            if not pod_started(pod):
                reason, message = _waiting(pod)
                return JobVerdict(FAILURE, slot.name, "startup", None, reason or "Pending", message)
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
        return any(slot.name not in self._pods or not pod_started(self._pods[slot.name]) for slot in self.slots)

    def seconds_to_deadline(self, now: float) -> float | None:
        """Until the next deadline (startup, or the end of a failing pull's grace) while some replica has not
        started; ``None`` when none is waiting."""
        if not self.waiting_for_start():
            return None
        deadlines = [self.startup_deadline, *(since + self.image_pull_grace for since in self.pull_failures.values())]
        return max(0.0, min(deadlines) - now)


# ------------------------------------------------------------------------------------------ the watch


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


# ------------------------------------------------------------------------------------------ logs


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
            return text
        self.last_ns, self._emitted_at_last, self._to_skip = ns, 1, 0
        return text

    def skip_second(self) -> None:
        """Go on after the second of the last line seen: its lines that are left (more than one read holds) are
        not shown, for a read from ``since_time()`` would bring back the same ones again."""
        second = (self.last_ns or 0) // 10**9
        self.last_ns, self._emitted_at_last, self._to_skip = (second + 1) * 10**9, 0, 0

    def as_dict(self) -> dict[str, int] | None:
        """Where the cursor is, JSON-safe (a trigger's event, the next trigger's argument); ``None`` before a line."""
        return None if self.last_ns is None else {"last_ns": self.last_ns, "emitted_at_last": self._emitted_at_last}

    @classmethod
    def from_dict(cls, state: Mapping[str, Any] | None) -> LogCursor:
        cursor = cls()
        if state and isinstance(state.get("last_ns"), int):
            cursor.last_ns = state["last_ns"]
            cursor._emitted_at_last = int(state.get("emitted_at_last") or 0)
            cursor._to_skip = cursor._emitted_at_last
        return cursor


def strip_timestamps(lines: Iterable[str]) -> list[str]:
    return [line.partition(" ")[2] if line[:4].isdigit() else line for line in lines]


# ------------------------------------------------------------------------------------------ the table


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
    reason, message = _waiting(pod)
    others = f" (and {len(queued) - 1} more)" if len(queued) > 1 else ""
    return (f"{len(queued)} of {len(pods)} replicas wait to be scheduled since {since}: "
            f"{first}{others}: {reason or 'Pending'}" + (f": {message}" if message else ""))


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

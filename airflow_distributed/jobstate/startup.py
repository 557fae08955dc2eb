"""How long a job took to start, phase by phase, per replica and for the job (pure: timestamps in, values out).

A replica goes ``created`` -> ``admitted`` -> ``scheduled`` -> ``image_pulled`` -> ``running`` -> ``rendezvous``
(its first progress report, else its first line). Each phase is a moment read from what the backend already has:

- a pod (``pod_startup``): its ``metadata.creationTimestamp``, its ``PodScheduled`` condition's
  ``lastTransitionTime`` (once true), its main container's ``startedAt`` (running or terminated); the pod's status
  has no time at which the image was pulled (only the kubelet's ``Pulled`` event has one, which would be a request
  per pod), so ``image_pulled`` is unknown there, and no admission of its own (``admitted`` is given by the caller
  where a queue admits the job: a Kubeflow job's ``Suspended`` condition);
- a local process (``process_startup``): when the task started it (``created`` and ``running``: no queue, no
  scheduler, no image);
- a Ray replica (``actor_startup``): what the job's driver saw of its placement group (asked for, granted), of the
  replica's actor (up in its bundle) and of the command the actor started (no image);
- the log of a replica, where the backend follows it (``LogCursor.first_ns`` and ``first_progress_ns``).

A phase with no moment is ``None`` (unknown), never guessed; the job's phase is its slowest replica's, unknown as
soon as one replica's is. The job's ``rendezvous`` is the master's first progress report where there is one (a step
of every rank has then been taken), else the last replica's first line. The result is the ``startup`` section of the
``job`` XCom, the job view and the OpenLineage run facet: seconds from the job's creation, rounded to the
millisecond, strict JSON.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Any

from airflow_distributed.jobstate.log_cursor import LogCursor
from airflow_distributed.manifests.pod_names import MAIN_CONTAINER

#: The phases in the order a replica goes through them.
PHASES = ("created", "admitted", "scheduled", "image_pulled", "running", "rendezvous")
#: What a ``rendezvous`` moment was read from.
BY_PROGRESS, BY_LINE = "progress", "line"
#: A job with more replicas than this lists the first ones (the job's phases count every one).
STARTUP_REPLICAS = 64

#: Why a phase is unknown on every replica of a backend (said once in the record, not per replica).
POD_UNKNOWN = {
    "admitted": "plain pods are not admitted by a queue",
    "image_pulled": "a pod's status has no image-pull time (only the kubelet's Pulled event has it): "
                    "the container's start includes the pull",
}
#: A custom job kind's (Kubeflow v1, TrainJob): admission is known where its ``Suspended`` condition says it.
NEVER_SUSPENDED = "the job was never suspended: no queue held it back"
#: A Ray replica's (``backend="ray"``): its actor runs in the cluster's Python environment.
ACTOR_UNKNOWN = {
    "image_pulled": "a Ray replica runs in the cluster's own Python environment: no image is pulled for it",
}
PROCESS_UNKNOWN = {
    "admitted": "no queue on the local backend",
    "scheduled": "no scheduler on the local backend",
    "image_pulled": "no image on the local backend",
}


@dataclass(frozen=True)
class ReplicaStartup:
    """One replica's moments (epoch seconds; ``None``: unknown) and what its ``rendezvous`` was read from."""

    name: str
    moments: Mapping[str, float | None] = field(default_factory=dict)
    rendezvous_by: str | None = None

    def at(self, phase: str) -> float | None:
        return self.moments.get(phase)


def epoch(stamp: Any) -> float | None:
    """An RFC 3339 time of the API (``2026-11-27T09:30:05Z``, fractions allowed) -> epoch seconds; None otherwise."""
    if not isinstance(stamp, str) or not stamp:
        return None
    text = stamp.strip()
    if text.endswith(("Z", "z")):
        text = text[:-1] + "+00:00"
    head, dot, rest = text.partition(".")
    if dot:  # Python's parser takes at most 6 digits of a fraction; the API may write 9
        digits = rest[:len(rest) - len(rest.lstrip("0123456789"))]
        text = f"{head}.{(digits + '000000')[:6]}{rest[len(digits):]}"
    try:
        moment = datetime.fromisoformat(text)
    except ValueError:
        return None
    return (moment if moment.tzinfo else moment.replace(tzinfo=timezone.utc)).timestamp()


def _condition_true_at(pod: Mapping[str, Any], kind: str) -> float | None:
    for condition in (pod.get("status") or {}).get("conditions") or []:
        if isinstance(condition, Mapping) and condition.get("type") == kind and condition.get("status") == "True":
            return epoch(condition.get("lastTransitionTime"))
    return None


def _container_started_at(pod: Mapping[str, Any], container: str) -> float | None:
    for status in (pod.get("status") or {}).get("containerStatuses") or []:
        if isinstance(status, Mapping) and status.get("name") == container:
            state = status.get("state") or {}
            started = (state.get("running") or state.get("terminated") or {}).get("startedAt")
            # A container that ended and waits to restart keeps its first start in lastState.
            earlier = ((status.get("lastState") or {}).get("terminated") or {}).get("startedAt")
            moments = [moment for moment in (epoch(started), epoch(earlier)) if moment is not None]
            return min(moments, default=None)
    return None


def admitted_at(obj: Mapping[str, Any] | None) -> float | None:
    """When a queue let a custom job run: its ``Suspended`` condition's ``lastTransitionTime`` once the condition
    is ``False`` (Kueue's admission, a resumed job); None while it is suspended or was never."""
    for condition in ((obj or {}).get("status") or {}).get("conditions") or []:
        if not isinstance(condition, Mapping) or condition.get("type") != "Suspended":
            continue
        if condition.get("status") == "False":
            return epoch(condition.get("lastTransitionTime"))
    return None


def custom_job_unknown(admitted: float | None) -> dict[str, str]:
    """Why a phase is unknown on every replica of a custom job: the image pull as for any pod, the admission when
    nothing admitted it."""
    return {"image_pulled": POD_UNKNOWN["image_pulled"], **({"admitted": NEVER_SUSPENDED} if admitted is None else {})}


def pod_startup(name: str, pod: Mapping[str, Any] | None, *, container: str = MAIN_CONTAINER,
                admitted: float | None = None, first_line: float | None = None,
                first_report: float | None = None) -> ReplicaStartup:
    """A replica's moments from its pod as the API gave it.

    :param container: the container whose start is the replica's (the main one; a custom kind may name another).
    :param admitted: when a queue admitted the job (a Kubeflow job's ``Suspended`` turning false), if it was.
    :param first_line: when the replica printed its first line (its log's timestamp), where its log was read.
    :param first_report: when it printed its first progress report (the master's live record).
    """
    if pod is None:
        return ReplicaStartup(name, {phase: None for phase in PHASES})
    moments = {
        "created": epoch((pod.get("metadata") or {}).get("creationTimestamp")),
        "admitted": admitted,
        "scheduled": _condition_true_at(pod, "PodScheduled"),
        "image_pulled": None,
        "running": _container_started_at(pod, container),
    }
    return _with_rendezvous(name, moments, first_line, first_report)


def process_startup(name: str, *, created: float, started: float | None, first_line: float | None = None,
                    first_report: float | None = None) -> ReplicaStartup:
    """A local replica's moments: ``created`` when the task set out to start the job, ``running`` when its process
    was started (epoch seconds)."""
    moments = {"created": created, "admitted": None, "scheduled": None, "image_pulled": None, "running": started}
    return _with_rendezvous(name, moments, first_line, first_report)


def actor_startup(name: str, *, created: float | None, admitted: float | None, placed: float | None,
                  started: float | None, first_line: float | None = None,
                  first_report: float | None = None) -> ReplicaStartup:
    """A Ray replica's moments, as its job's driver saw them (epoch seconds on the cluster's clocks).

    :param created: when the driver asked for the job's placement group (the replica's bundle).
    :param admitted: when the cluster granted the whole placement group (every replica's resources reserved).
    :param placed: when the replica's actor came up in its bundle (``scheduled``: placed on its node).
    :param started: when the actor started the replica's command (``running``).
    :param first_line: when the replica printed its first line, as its actor read it.
    :param first_report: when it printed its first progress record (the master's live record).
    """
    moments = {"created": created, "admitted": admitted, "scheduled": placed, "image_pulled": None,
               "running": started}
    return _with_rendezvous(name, moments, first_line, first_report)


def _with_rendezvous(name: str, moments: dict[str, float | None], first_line: float | None,
                     first_report: float | None) -> ReplicaStartup:
    if first_report is not None:
        return ReplicaStartup(name, {**moments, "rendezvous": first_report}, BY_PROGRESS)
    if first_line is not None:
        return ReplicaStartup(name, {**moments, "rendezvous": first_line}, BY_LINE)
    return ReplicaStartup(name, {**moments, "rendezvous": None})


def job_startup(replicas: Sequence[ReplicaStartup], *, master: str | None = None,
                unknown: Mapping[str, str] | None = None, created: float | None = None) -> dict[str, Any]:
    """The ``startup`` section of a job: per replica and for the job, seconds from the job's creation to each phase.

    :param master: the master replica's name: its first progress report is the job's rendezvous.
    :param unknown: why a phase is unknown on every replica of this backend (``POD_UNKNOWN``, ``PROCESS_UNKNOWN``).
    :param created: when the job was created (epoch seconds); default: its first replica's creation.
    :returns: ``{"created_at", "job": {phase: seconds | None}, "slowest": {phase: replica}, "rendezvous_by",
        "replicas": {name: {phase: seconds | None, "rendezvous_by"}}, "unknown": {phase: why}}``; ``{}`` when no
        replica has a known creation.
    """
    replicas = list(replicas)
    start = created if created is not None else min(
        (moment for replica in replicas if (moment := replica.at("created")) is not None), default=None)
    if start is None:
        return {}
    job: dict[str, float | None] = {}
    slowest: dict[str, str] = {}
    for phase in PHASES:
        known = [(moment, replica.name) for replica in replicas if (moment := replica.at(phase)) is not None]
        if replicas and len(known) == len(replicas):
            moment, name = max(known)
            job[phase], slowest[phase] = _seconds(moment - start), name
        else:
            job[phase] = None
    rendezvous_by = BY_LINE if job["rendezvous"] is not None else None
    by_master = next((r for r in replicas if r.name == master and r.rendezvous_by == BY_PROGRESS), None)
    if by_master is not None:
        job["rendezvous"], slowest["rendezvous"], rendezvous_by = (
            _seconds((by_master.at("rendezvous") or 0.0) - start), by_master.name, BY_PROGRESS)
    listed = {
        replica.name: {**{phase: _seconds(moment - start) if (moment := replica.at(phase)) is not None else None
                          for phase in PHASES},
                       "rendezvous_by": replica.rendezvous_by}
        for replica in replicas[:STARTUP_REPLICAS]
    }
    return {
        "created_at": datetime.fromtimestamp(start, tz=timezone.utc).isoformat().replace("+00:00", "Z"),
        "job": job,
        "slowest": slowest,
        "rendezvous_by": rendezvous_by,
        "replicas": listed,
        **({"replicas_left_out": len(replicas) - len(listed)} if len(replicas) > len(listed) else {}),
        "unknown": dict(unknown or {}),
    }


def started(startup: Mapping[str, Any]) -> bool:
    """Whether the job got past its rendezvous (every phase it can know is known)."""
    job = startup.get("job") if isinstance(startup, Mapping) else None
    return isinstance(job, Mapping) and job.get("rendezvous") is not None


def startup_line(name: str, startup: Mapping[str, Any]) -> str | None:
    """One short line for the task log: ``startup of <job>: scheduled 1.0s, running 3.0s, rendezvous 9.8s (first
    progress, slowest train-worker-1); unknown: admitted, image_pulled``; None without a ``startup`` section."""
    job = startup.get("job") if isinstance(startup, Mapping) else None
    if not isinstance(job, Mapping):
        return None
    slowest = startup.get("slowest") or {}
    parts = [f"{phase} {job[phase]:.1f}s" for phase in PHASES[1:] if _finite(job.get(phase))]
    unknown = [phase for phase in PHASES[1:] if not _finite(job.get(phase))]
    by = {BY_PROGRESS: "first progress", BY_LINE: "first line"}.get(str(startup.get("rendezvous_by")))
    after = f" ({by}, slowest {slowest['rendezvous']})" if by and slowest.get("rendezvous") else ""
    line = f"startup of {name}: {', '.join(parts) or 'no phase known'}{after}"
    return line + (f"; unknown: {', '.join(unknown)}" if unknown else "")


def replica_lines(startup: Mapping[str, Any], limit: int = 8) -> list[str]:
    """A line per replica (the first ``limit``), for a job whose replicas did not start alike: ``  train-worker-1:
    scheduled 1.0s, running 3.0s, rendezvous 9.8s (first line)``."""
    rows = startup.get("replicas") if isinstance(startup, Mapping) else None
    if not isinstance(rows, Mapping):
        return []
    lines = []
    for name, row in list(rows.items())[:limit]:
        parts = [f"{phase} {row[phase]:.1f}s" for phase in PHASES[1:] if _finite(row.get(phase))]
        by = {BY_PROGRESS: " (first progress)", BY_LINE: " (first line)"}.get(str(row.get("rendezvous_by")), "")
        lines.append(f"  {name}: {', '.join(parts) or 'no phase known'}{by if _finite(row.get('rendezvous')) else ''}")
    return lines


def _finite(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def _seconds(value: float) -> float:
    return round(value, 3)


def master_log_cursor(relayed: Mapping[str, Any] | None, uid: str, stamped: Sequence[str], asked: int) -> LogCursor:
    """Where a deferred job's master printed its first line and first progress record: the trigger's relay cursor
    (``log_relay``'s event state) when it is this pod's and saw a line, else its last lines when they are its whole
    log (fewer than were asked for), else nothing known.

    :param relayed: the event's ``log_cursor`` (``LogCursor.as_dict`` with the pod's ``uid``), or None.
    :param uid: the master pod's uid as the task reads it now.
    :param stamped: the master's last lines with their timestamps (``timestamps=true``), as the task read them.
    :param asked: how many lines the read asked for (``tailLines``).
    """
    if relayed and relayed.get("uid") == uid and isinstance(relayed.get("first_ns"), int):
        return LogCursor.from_dict(relayed)
    cursor = LogCursor()
    if len(stamped) < asked:
        for line in stamped:
            cursor.accept(line)
    return cursor


def first_moments(cursors: Iterable[tuple[str, LogCursor]]) -> dict[str, tuple[float | None, float | None]]:
    """``{replica: (first line, first progress record)}`` in epoch seconds from ``(replica, LogCursor)`` pairs."""
    out: dict[str, tuple[float | None, float | None]] = {}
    for name, cursor in cursors:
        line, report = cursor.first_ns, cursor.first_progress_ns
        out[name] = (line / 1e9 if line is not None else None, report / 1e9 if report is not None else None)
    return out


__all__ = ["ACTOR_UNKNOWN", "BY_LINE", "BY_PROGRESS", "NEVER_SUSPENDED", "PHASES", "POD_UNKNOWN", "PROCESS_UNKNOWN",
           "STARTUP_REPLICAS", "ReplicaStartup", "actor_startup", "admitted_at", "custom_job_unknown", "epoch",
           "first_moments", "job_startup", "master_log_cursor", "pod_startup", "process_startup", "replica_lines",
           "started", "startup_line"]

"""``JobEvent``: what a trigger fires when its wait for a job is over, typed (pure).

A trigger builds one and fires ``to_payload()``; ``execute_complete`` (an operator's resume, a sensor's) reads it back
with ``from_payload``. The payload is the plain dict the triggers have always fired, key for key, so that a trigger
and a task of the same release read each other and a payload stored by the triggerer reads the same::

    {"job_name": "j", "namespace": "ns", "started_at": 1.0, "replicas": [...], "status": "failed",
     "verdict": {"state": "failed", "replica": "j-worker-0", "cause": "exit", "exit_code": 3}}

``status`` says what kind of event it is (``EventKind``): the job's own end as its replicas or its controller said it
(``succeeded``, ``failed``), or how the wait ended without one (``timeout``, ``error``, ``deleted``), or a Ray job
that reached a final state, named in ``state`` (``final``).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, fields
from typing import Any

from airflow_distributed.jobstate.verdicts import JobVerdict
from airflow_distributed.status import ReplicaState, StrEnum, plain


class EventKind(StrEnum):
    """What a trigger's event says (its payload's ``status``). A member is its string (``EventKind.ERROR ==
    "error"``); ``SUCCEEDED`` and ``FAILED`` are ``ReplicaState``'s words."""

    #: the job succeeded (its verdict, or its controller's condition)
    SUCCEEDED = ReplicaState.SUCCEEDED.value
    #: the job failed (``verdict`` says which replica and why, where the trigger judged it)
    FAILED = ReplicaState.FAILED.value
    #: the task's ``execution_timeout`` came in the triggerer
    TIMEOUT = "timeout"
    #: the trigger could not wait (``message``; ``error_class``: the error the resumed task raises)
    ERROR = "error"
    #: the job's object was deleted before it finished
    DELETED = "deleted"
    #: a Ray job reached a final state (``state``: Ray's word for it)
    FINAL = "final"


@dataclass(frozen=True)
class JobEvent:
    """A trigger's event, field for field its payload's keys (a field left ``None`` is a key the payload lacks).

    :param kind: the payload's ``status``.
    :param job_name: the job waited for.
    :param namespace: its namespace (Kubernetes kinds).
    :param started_at: when the job was submitted (epoch seconds): the resumed task's elapsed time.
    :param resume_state: what the deferring task handed the trigger for its resume (framework, elastic budget...).
    :param replicas: the replicas watched (``slots_to_json``; the pods backend).
    :param state: a Ray job's final state (``final``).
    :param elapsed: seconds the wait lasted (a Ray ``timeout``).
    :param reason: the controller's reason, or the trigger's own verdict's (``JOB_HUNG``...; Kubeflow kinds).
    :param message: what went with the event's kind or reason.
    :param verdict: the trigger's verdict on the job, where it judged one.
    :param error_class: the name of the error the resumed task raises (``error``; ``exceptions.error_class_named``).
    :param taken_away: the job's pods the cluster took away, as the trigger saw them (``TakenAway.as_dict``).
    :param log_cursor: where the trigger's relay of the master's log stopped (``LogRelay.state``).
    """

    kind: EventKind
    job_name: str | None = None
    namespace: str | None = None
    started_at: float | None = None
    resume_state: Mapping[str, Any] | None = None
    replicas: list[list[Any]] | None = None
    state: str | None = None
    elapsed: float | None = None
    reason: str | None = None
    message: str | None = None
    verdict: JobVerdict | None = None
    error_class: str | None = None
    taken_away: Mapping[str, Any] | None = None
    log_cursor: Mapping[str, Any] | None = None

    def __post_init__(self) -> None:
        object.__setattr__(self, "kind", EventKind(self.kind))

    @property
    def ended(self) -> bool:
        """Whether the job's own end is what the event says (``succeeded`` or ``failed``), not the wait's."""
        return self.kind in (EventKind.SUCCEEDED, EventKind.FAILED)

    @property
    def text(self) -> str:
        """The event's message, else its kind's word (what a failed wait says when it says nothing more)."""
        return self.message or self.kind.value

    def to_payload(self) -> dict[str, Any]:
        """The dict a trigger fires: the fields set, under today's keys and in today's order, as plain JSON values."""
        payload: dict[str, Any] = {}
        for item in fields(self):
            value = getattr(self, item.name)
            if value is None:
                continue
            if item.name == "kind":
                payload["status"] = value.value
            elif isinstance(value, JobVerdict):
                payload[item.name] = value.as_dict()
            else:
                payload[item.name] = plain(value)
        return _in_payload_order(payload)

    @classmethod
    def from_payload(cls, payload: Mapping[str, Any]) -> JobEvent:
        """The event of a payload a trigger fired (this package's, of this release or an earlier one); a key it
        does not know is left out, a ``status`` that is no ``EventKind`` raises ``ValueError`` naming it.

        :param payload: the trigger's event payload.
        """
        if "status" not in payload:
            raise ValueError(f"a trigger's event has no 'status' (one of {', '.join(EventKind)}): keys "
                             f"{sorted(payload)}")
        status = payload["status"]
        if status not in tuple(EventKind):
            raise ValueError(f"a trigger's event 'status' {status!r} is not one of {', '.join(EventKind)}")
        known = {item.name for item in fields(cls)} - {"kind"}
        found = {key: value for key, value in payload.items() if key in known and value is not None}
        if isinstance(found.get("verdict"), Mapping):
            found["verdict"] = JobVerdict.from_dict(found["verdict"])
        return cls(kind=EventKind(status), **found)

    @classmethod
    def read(cls, event: Any) -> JobEvent | None:
        """The job event among what a deferred task is resumed with: ``None`` for another trigger's (the moment a
        ``TimeDeltaTrigger`` fires with), or none at all.

        :param event: what ``execute_complete`` got as its ``event``.
        """
        return cls.from_payload(event) if isinstance(event, Mapping) and "status" in event else None


#: The order of the payload's keys as the triggers have always written them: the fields common to every event
#: first, then its status and what goes with it, then what the trigger adds last.
_KEY_ORDER = ("job_name", "namespace", "started_at", "resume_state", "replicas", "status", "state", "elapsed",
              "reason", "message", "verdict", "error_class", "taken_away", "log_cursor")


def _in_payload_order(payload: dict[str, Any]) -> dict[str, Any]:
    return {key: payload[key] for key in _KEY_ORDER if key in payload}


__all__ = ["EventKind", "JobEvent"]

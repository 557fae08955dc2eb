"""How a job ended, on any backend, and the one failure message built from it.

Pure: the hooks fill a ``JobOutcome`` from what they saw (local processes, a job's pods, a Kubeflow object) and
every backend, synchronous or resumed after a deferral, turns a failed one into its error with
``failure_message``, so that the same ending reads the same wherever the job ran::

    job <id> failed after 12.3s: replica train-worker-1 exited with code 3; every other replica was stopped
      events:
        Warning FailedScheduling: ...
    . Its last lines:
        RuntimeError: ...
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from airflow_distributed.jobstate.disruption import taken_away
from airflow_distributed.manifests.pod_names import MAIN_CONTAINER
from airflow_distributed.status import ReplicaStatus, StrEnum


class Ending(StrEnum):
    """How a job ended. A replica's container exited non-zero (``exit``), its pod failed without an exit code
    (``pod``), it or the whole job was deleted (``deleted``), its image cannot be pulled (``image``), it did not start
    in time (``startup``), the task was killed (``stopped``), the wait ran out of time (``timeout``), an elastic job
    gave up (``gave_up``), a controller or the waiter said ``failed`` without naming a replica (``failed``), or the
    job reported no progress for ``progress_timeout`` while every replica ran (``hung``), or a replica was not
    scheduled within ``queue_timeout`` (``queue``: no capacity or quota for it). A member is its string
    (``Ending.EXITED == "exit"``)."""

    SUCCEEDED = "succeeded"
    EXITED = "exit"
    POD_FAILED = "pod"
    DELETED = "deleted"
    IMAGE = "image"
    NOT_STARTED = "startup"
    STOPPED = "stopped"
    TIMED_OUT = "timeout"
    GAVE_UP = "gave_up"
    FAILED = "failed"
    HUNG = "hung"
    QUEUED = "queue"


#: Lines of the deciding replica's log a failure message quotes.
MESSAGE_TAIL_LINES = 15
#: Lines of each replica's log the message of a hung job quotes (its Python stacks, where it dumped them).
HUNG_TAIL_LINES = 40


@dataclass(frozen=True)
class JobOutcome:
    """How a wait for a job ended.

    :param ending: how it ended (its string is read as the member: ``"exit"`` is ``Ending.EXITED``).
    :param replicas: every replica's last status.
    :param replica: the replica whose end decided the job, when one did.
    :param exit_code: its exit code (``exit``; negative: killed by that signal on the local backend).
    :param reason: Kubernetes' reason (``OOMKilled``, ``Unschedulable``, ``ErrImagePull``...); for ``gave_up``,
        why the elastic job gave up.
    :param message: the kubelet's, scheduler's or waiter's message that goes with ``reason``.
    :param container: the container whose exit decided, when not the main one.
    :param image: the image that cannot be pulled (``image``).
    :param judgement: the controller's own reason and message, when a controller judged the job (Kubeflow kinds).
    :param tail: the deciding replica's last lines.
    :param events: the deciding replica's pod's latest events (a pod that did not start).
    :param logs: last lines of the replicas whose logs were followed, by replica.
    :param pods: the last pod seen of each replica, by replica (Kubernetes).
    :param job_object: the job's object as last seen (Kubeflow kinds; ``None`` once deleted).
    :param disruption: how the cluster took the deciding replica away, when it did: its pod's ``DisruptionTarget``
        reason (``EvictionByEvictionAPI``, ``PreemptionByScheduler``, ``DeletionByTaintManager``...), the pod's
        own (``Evicted``, ``Preempting``, ``NodeLost``...), or ``DeletionStarted`` (a pod being deleted or evicted,
        ``disruption.pod_disruption``). It picks the error's class, and the message says what took the replica.
    """

    ending: Ending
    replicas: tuple[ReplicaStatus, ...] = ()
    replica: str | None = None
    exit_code: int | None = None
    reason: str | None = None
    message: str | None = None
    container: str | None = None
    image: str | None = None
    judgement: str | None = None
    tail: tuple[str, ...] = ()
    events: tuple[str, ...] = ()
    logs: Mapping[str, Sequence[str]] = field(default_factory=dict)
    pods: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)
    job_object: Mapping[str, Any] | None = None
    disruption: str | None = None

    def __post_init__(self) -> None:
        if self.ending not in tuple(Ending):
            raise ValueError(f"ending {self.ending!r} is not one of {', '.join(Ending)}")
        object.__setattr__(self, "ending", Ending(self.ending))  # a string given for it reads as the member

    @property
    def succeeded(self) -> bool:
        return self.ending == Ending.SUCCEEDED


def _detail(*parts: str | None) -> str:
    return ": ".join(part for part in parts if part)


def describe(outcome: JobOutcome, startup_timeout: float | None = None, queue_timeout: float | None = None) -> str:
    """What ended the job, in one line without the job's name (``replica x exited with code 3 (OOMKilled)``).

    :param startup_timeout: named in a ``startup`` ending.
    :param queue_timeout: named in a ``queue`` ending.
    """
    text = _describe(outcome, startup_timeout, queue_timeout)
    return f"{outcome.judgement}; {text}" if outcome.judgement and text else (outcome.judgement or text)


def _describe(outcome: JobOutcome, startup_timeout: float | None, queue_timeout: float | None) -> str:
    ending, replica = outcome.ending, outcome.replica
    if ending == Ending.SUCCEEDED:
        return "the master succeeded"
    taken = f" was {taken_away(outcome.disruption)}" if outcome.disruption else ""
    if ending == Ending.EXITED:
        where = "" if outcome.container in (None, MAIN_CONTAINER) else f" (container {outcome.container})"
        reason = f" ({outcome.reason})" if outcome.reason and outcome.reason != "Error" else ""
        # Taken away, its exit code is how it went (143 after SIGTERM, 137 after a kill), not what went wrong.
        return f"replica {replica}{taken}{' and' if taken else ''} exited with code {outcome.exit_code}{reason}{where}"
    if ending == Ending.IMAGE:
        what = "is not a valid image name" if outcome.reason == "InvalidImageName" else "could not be pulled"
        return (f"replica {replica}: image {json.dumps(outcome.image or '?')} {what} "
                f"({_detail(outcome.reason, outcome.message)})")
    if ending == Ending.NOT_STARTED:
        within = f" within {startup_timeout:g}s" if startup_timeout is not None else ""
        who = f"replica {replica}" if replica else "the job's replicas"  # a Ray job's placement group: all at once
        return f"{who} did not start{within}: {_detail(outcome.reason, outcome.message) or 'Pending'}"
    if ending == Ending.DELETED:
        if not replica:
            return "the job was deleted before it finished"
        return f"the pod of replica {replica}{taken or ' was deleted'}"
    if ending == Ending.STOPPED:
        return "the job was stopped (task killed)"
    if ending == Ending.TIMED_OUT:
        return outcome.message or "the job timed out"
    if ending == Ending.GAVE_UP:
        return outcome.reason or f"the elastic job gave up after replica {replica} ended"
    if ending == Ending.HUNG:
        return outcome.message or "the job hung"
    if ending == Ending.QUEUED:
        within = f" within {queue_timeout:g}s (queue_timeout)" if queue_timeout is not None else ""
        return (f"{f'replica {replica}' if replica else 'the job'} was not scheduled{within}: "
                f"{_detail(outcome.reason, outcome.message) or 'Unschedulable'}")
    if ending == Ending.POD_FAILED:
        detail = _detail(outcome.reason, outcome.message) or "Failed"
        return f"the pod of replica {replica}{taken or ' failed'}: {detail}"
    return "" if outcome.judgement else (_detail(outcome.reason, outcome.message) or "failed")


def failure_message(job: str, outcome: JobOutcome, elapsed: float, cleanup: str, *,
                    startup_timeout: float | None = None, queue_timeout: float | None = None) -> str:
    """The error of a job that did not succeed: ``job <id> failed after X.Xs: <what>; <clean-up note>``, then the
    deciding pod's events and the deciding replica's last lines.

    :param job: the job as the backend names it (``name``, or ``namespace/name``).
    :param cleanup: what was done with the job's replicas (``every other replica was stopped``).
    """
    if outcome.ending == Ending.STOPPED:
        return f"job {job} was stopped after {elapsed:.1f}s (task killed); {cleanup}"
    message = f"job {job} failed after {elapsed:.1f}s: {describe(outcome, startup_timeout, queue_timeout)}; {cleanup}"
    if outcome.events:
        message += "\n  events:\n" + "\n".join(f"    {line}" for line in outcome.events)
    # A replica that exited has last lines worth reading, even none ("(no output)" says it printed nothing).
    exited = outcome.ending == Ending.EXITED or (outcome.ending == Ending.GAVE_UP and outcome.exit_code is not None)
    if outcome.tail or exited:
        lines = "\n".join(f"    {line}" for line in outcome.tail[-MESSAGE_TAIL_LINES:]) or "    (no output)"
        message += f". Its last lines:\n{lines}"
    if outcome.ending == Ending.HUNG:
        for name, tail in outcome.logs.items():
            lines = "\n".join(f"    {line}" for line in list(tail)[-HUNG_TAIL_LINES:]) or "    (no output)"
            message += f"\n  {name}, last lines:\n{lines}"
    return message


__all__ = ["HUNG_TAIL_LINES", "MESSAGE_TAIL_LINES", "Ending", "JobOutcome", "describe", "failure_message"]

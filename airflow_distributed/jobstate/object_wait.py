"""The one judge of a wait on a custom-object job (a Kubeflow v1 kind's, a TrainJob), for the task's synchronous wait
(``KubeflowJobHook.wait_for_kubeflow_job``) and the trigger (``KubeflowJobTrigger``) alike (pure: what the wait saw
in, the end out). The drivers do the I/O (the object's watch, the pods' LISTs, the master's log) and hand what they
saw to ``judge_object_wait``; the sync wait turns its answer into a ``JobOutcome``, the trigger into its event.

One decision order:

1. stopped (the task was killed; the synchronous wait only);
2. deleted (the object is gone before it finished);
3. the controller's judgement: the job's ``Succeeded``/``Failed`` (a TrainJob's ``Complete``/``Failed``) condition,
   since it is the job's own word and a finished job is neither pending nor hung;
4. the pending pods' verdict (``pending_pods``: a replica's image cannot be pulled, or the job waited for capacity
   past ``queue_timeout``);
5. the hang watchdog's ``hung`` verdict (``hang_watch``).

Pending before hung: the watchdog's clock runs only while every replica runs (a job still starting or queued is never
hung, ``docs/failures.md``), so a replica seen pending since the watchdog's last look means the job is not hung by
that rule; and the pending verdict names the cause (the replica and its image, or why the job waits for capacity)
where ``hung`` names its symptom (a master blocked on a peer that never came), and is not retried at once as a hung
job is.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from airflow_distributed.jobstate.job_event import EventKind, JobEvent
from airflow_distributed.jobstate.object_watch import ObjectWatch
from airflow_distributed.jobstate.outcome import Ending, JobOutcome
from airflow_distributed.jobstate.pending_pods import IMAGE_PULL_FAILED, JOB_HUNG, QUEUE_TIMED_OUT
from airflow_distributed.jobstate.verdicts import JobVerdict
from airflow_distributed.manifests.kubeflow_status import JobStatus
from airflow_distributed.status import ReplicaState

#: How a wait ended (``ObjectWaitEnd.how``).
STOPPED, DELETED, JUDGED, OWN = "stopped", "deleted", "judged", "own"


def status_outcome(status: JobStatus, obj: Mapping[str, Any] | None) -> JobOutcome:
    """The ``JobOutcome`` of a job its controller judged (succeeded or failed, in its own words)."""
    if status.state == ReplicaState.SUCCEEDED:
        return JobOutcome(Ending.SUCCEEDED, job_object=obj)
    return JobOutcome(Ending.FAILED, judgement=": ".join(part for part in (status.reason, status.message) if part),
                      job_object=obj)


def own_reason(verdict: JobVerdict) -> str:
    """The reason a wait's own verdict (one the job's status does not show) is fired with: ``JobHung``,
    ``QueueTimedOut`` or ``ImagePullFailed`` (``pending_pods.OWN_VERDICTS``)."""
    if verdict.cause == Ending.HUNG:
        return JOB_HUNG
    return QUEUE_TIMED_OUT if verdict.cause == Ending.QUEUED else IMAGE_PULL_FAILED


@dataclass(frozen=True)
class ObjectWaitEnd:
    """The end of a wait: ``how`` (``STOPPED``, ``DELETED``, ``JUDGED`` by the job's controller, or the wait's
    ``OWN`` verdict), the object as last seen, the controller's status (``JUDGED``) or the verdict (``OWN``)."""

    how: str
    obj: Mapping[str, Any] | None = None
    status: JobStatus | None = None
    verdict: JobVerdict | None = None

    def outcome(self) -> JobOutcome:
        """The synchronous wait's ``JobOutcome``."""
        if self.how == STOPPED:
            return JobOutcome(Ending.STOPPED, job_object=self.obj)
        if self.how == DELETED:
            return JobOutcome(Ending.DELETED)
        if self.how == JUDGED:
            assert self.status is not None
            return status_outcome(self.status, self.obj)
        assert self.verdict is not None
        return self.verdict.outcome(job_object=self.obj)

    def event(self, what: str) -> JobEvent:
        """The trigger's event (``what``: the job as its messages name it); read back by ``KubeflowJobRun.complete``.

        :raises ValueError: a stopped wait, which only the synchronous wait has.
        """
        if self.how == DELETED:
            return JobEvent(EventKind.DELETED, message=f"{what} was deleted before it finished")
        if self.how == JUDGED:
            assert self.status is not None
            return JobEvent(EventKind(self.status.state), reason=self.status.reason, message=self.status.message)
        if self.how == OWN:
            assert self.verdict is not None
            reason = own_reason(self.verdict)
            message = self.verdict.message if reason == JOB_HUNG else self.verdict.describe()
            return JobEvent(EventKind.FAILED, reason=reason, message=message, verdict=self.verdict)
        raise ValueError(f"a {self.how} wait has no trigger event")


def judge_object_wait(watch: ObjectWatch, status_of: Callable[[Mapping[str, Any]], JobStatus],
                      pending: JobVerdict | None, hung: JobVerdict | None, *, stopped: bool = False
                      ) -> ObjectWaitEnd | None:
    """How the wait ends now, in the module's one order, or ``None`` while it goes on.

    :param watch: the job object as the wait last saw it (``None`` until seen; ``deleted`` once gone).
    :param status_of: the kind's reading of an object's status (``JobKind.status_of``).
    :param pending: the pending pods' verdict (``PendingPods.verdict``).
    :param hung: the hang watchdog's verdict (``hang_watch.hung_verdict``), ``None`` without one.
    :param stopped: the task was killed (the synchronous wait).
    """
    if stopped:
        return ObjectWaitEnd(STOPPED, watch.obj)
    if watch.obj is None:
        return ObjectWaitEnd(DELETED) if watch.deleted else None
    status = status_of(watch.obj)
    if status.state in (ReplicaState.SUCCEEDED, ReplicaState.FAILED):
        return ObjectWaitEnd(JUDGED, watch.obj, status=status)
    for verdict in (pending, hung):
        if verdict is not None:
            return ObjectWaitEnd(OWN, watch.obj, verdict=verdict)
    return None


__all__ = ["DELETED", "JUDGED", "OWN", "STOPPED", "ObjectWaitEnd", "judge_object_wait", "own_reason",
           "status_outcome"]

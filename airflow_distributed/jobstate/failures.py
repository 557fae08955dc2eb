"""Which error a failed job raises: the one table from a ``JobOutcome``'s ending to its class (``exceptions``).

Pure: every backend, synchronous or resumed after a deferral, raises ``job_failure(...)``, whose message is
``failure_message``'s and whose class says what kind of ending it was, for a retry policy to act on.
"""

from __future__ import annotations

from airflow_distributed.exceptions import (
    DistributedJobError,
    ImagePullError,
    JobHungError,
    ReplicaExitedError,
    ReplicaLostError,
    ReplicaNotScheduledError,
    ReplicaNotStartedError,
    ReplicaOOMKilledError,
)
from airflow_distributed.jobstate.outcome import Ending, JobOutcome, failure_message

#: The class of each ending; ``failure_class`` refines it with the outcome's facts (below).
FAILURE_CLASSES: dict[str, type[DistributedJobError]] = {
    Ending.EXITED: ReplicaExitedError,
    Ending.POD_FAILED: DistributedJobError,
    Ending.DELETED: ReplicaLostError,
    Ending.IMAGE: ImagePullError,
    Ending.NOT_STARTED: ReplicaNotStartedError,
    Ending.STOPPED: DistributedJobError,
    Ending.TIMED_OUT: DistributedJobError,
    Ending.GAVE_UP: DistributedJobError,
    Ending.FAILED: DistributedJobError,
    Ending.HUNG: JobHungError,
    Ending.QUEUED: ReplicaNotScheduledError,
}
#: Endings of one replica that the cluster may have caused by taking the replica away (``JobOutcome.disruption``).
REPLICA_ENDINGS = (Ending.EXITED, Ending.POD_FAILED, Ending.DELETED)
#: Kubernetes' reason of a container or pod killed for its memory.
OOM_REASON = "OOMKilled"


def failure_class(outcome: JobOutcome) -> type[DistributedJobError]:
    """The class of the error of a job that ended so (``FAILURE_CLASSES``), refined by what is known of it:

    - a replica the cluster took away (evicted, preempted, its node lost: ``outcome.disruption``) whatever its
      container did as it went: ``ReplicaLostError``;
    - a replica killed for its memory (``OOMKilled``): ``ReplicaOOMKilledError``;
    - the whole job deleted under the task (no replica named): ``DistributedJobError``.
    """
    if outcome.ending in REPLICA_ENDINGS and outcome.disruption is not None:
        return ReplicaLostError
    if outcome.ending in (Ending.EXITED, Ending.POD_FAILED) and outcome.reason == OOM_REASON:
        return ReplicaOOMKilledError
    if outcome.ending == Ending.DELETED and outcome.replica is None:
        return DistributedJobError
    return FAILURE_CLASSES.get(outcome.ending, DistributedJobError)


def job_failure(job: str, outcome: JobOutcome, elapsed: float, cleanup: str, *,
                startup_timeout: float | None = None, queue_timeout: float | None = None,
                default: type[DistributedJobError] | None = None) -> DistributedJobError:
    """The error to raise for a job that did not succeed: ``failure_message``'s words, ``failure_class``'s class,
    the outcome's facts (replica, reason, exit code, image...) as its attributes.

    :param default: the class when the ending names none of its own (``FAILED``, ``TIMED_OUT``...), e.g. the one a
        trigger's event named for the error that ended its wait.
    """
    chosen = failure_class(outcome)
    if default is not None and chosen is DistributedJobError:
        chosen = default
    message = failure_message(job, outcome, elapsed, cleanup, startup_timeout=startup_timeout,
                              queue_timeout=queue_timeout)
    return chosen(message, outcome=outcome)


__all__ = ["FAILURE_CLASSES", "OOM_REASON", "REPLICA_ENDINGS", "failure_class", "job_failure"]

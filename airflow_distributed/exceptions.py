"""What a failed job raises: one class for each way a job ends badly, so that Airflow (and a retry policy) can tell
them apart.

Every class is a ``DistributedJobError``; its message is the one ``jobstate.outcome.failure_message`` words, the
same for the same ending on every backend. Which class an ending raises is one table, ``jobstate.failures``.

============================  ===========================================================================
class                         the job ended because
============================  ===========================================================================
``ReplicaLostError``          a replica's pod was evicted, preempted, or lost with its node, or deleted
``ReplicaOOMKilledError``     a replica was killed for running out of memory (``OOMKilled``)
``ReplicaExitedError``        a replica's script exited non-zero (``exit_code``)
``ImagePullError``            a replica's image cannot be pulled, or is not a valid image name
``ReplicaNotStartedError``    a replica was not scheduled or did not start within its limit
``ReplicaNotScheduledError``  a replica was not scheduled within ``queue_timeout`` (a ``ReplicaNotStartedError``)
``JobHungError``              the job stopped reporting progress while every replica ran
``ClusterRefusedError``       the cluster refused a request: credentials (401/403) or an invalid object
``ApiUnavailableError``       the Kubernetes API stayed unavailable past the retry budget
============================  ===========================================================================

Light to import: the operator imports it when a DAG is parsed.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from airflow.sdk.exceptions import AirflowException

if TYPE_CHECKING:
    from airflow_distributed.jobstate.outcome import JobOutcome


class DistributedJobError(AirflowException):
    """The job ran and failed: a replica exited non-zero, or it timed out.

    :param message: what happened, as the task log shows it.
    :param outcome: how the job ended, when it was watched to its end: its facts become the attributes below.

    :ivar ending: the ``JobOutcome`` ending (``exit``, ``pod``, ``deleted``, ``image``...), when known.
    :ivar replica: the replica whose end decided the job, when one did.
    :ivar reason: Kubernetes' reason (``OOMKilled``, ``Evicted``, ``ErrImagePull``, ``Unschedulable``...).
    :ivar detail: the kubelet's, scheduler's or waiter's message that goes with ``reason``.
    :ivar exit_code: the deciding replica's exit code (negative: killed by that signal, local backend).
    :ivar image: the image that cannot be pulled.
    :ivar disruption: how the cluster took the replica away (``DisruptionTarget`` reason, ``Evicted``...).
    """

    def __init__(self, message: str = "", *, outcome: JobOutcome | None = None) -> None:
        super().__init__(message)
        self.ending: str | None = None if outcome is None else outcome.ending
        self.replica: str | None = None if outcome is None else outcome.replica
        self.reason: str | None = None if outcome is None else outcome.reason
        self.detail: str | None = None if outcome is None else outcome.message
        self.exit_code: int | None = None if outcome is None else outcome.exit_code
        self.image: str | None = None if outcome is None else outcome.image
        self.disruption: str | None = None if outcome is None else outcome.disruption

    def __reduce__(self) -> tuple[Any, ...]:
        # The facts ride along with the message: a copy or a pickle keeps them.
        return type(self), (str(self),), dict(self.__dict__)


class ReplicaLostError(DistributedJobError):
    """A replica's pod was taken away under the job: evicted, preempted, its node lost or drained, or deleted.

    Nothing was wrong with the job: a retry resumes from its last checkpoint.
    """


class ReplicaOOMKilledError(DistributedJobError):
    """A replica was killed for using more memory than its limit (``OOMKilled``)."""


class ReplicaExitedError(DistributedJobError):
    """A replica's script exited non-zero; ``exit_code`` is its code."""


class ImagePullError(DistributedJobError):
    """A replica's image cannot be pulled (``ErrImagePull``, ``ImagePullBackOff``) or is not a valid name; a
    retry pulls the same image."""


class ReplicaNotStartedError(DistributedJobError):
    """A replica was not scheduled, or did not start, within its limit (``startup_timeout``)."""


class ReplicaNotScheduledError(ReplicaNotStartedError):
    """A replica waited for capacity or quota (unschedulable, held by Kueue) past ``queue_timeout``."""


class JobHungError(DistributedJobError):
    """The job reported no progress for too long while every replica ran (a rank stuck in a collective)."""


class KubernetesJobError(AirflowException):
    """A Kubernetes API call for a job failed for good; the message names the object (namespace/name).

    :param status: the HTTP status of the last answer, when there was one.
    """

    def __init__(self, message: str = "", status: int | None = None, *, outcome: JobOutcome | None = None) -> None:
        # Cooperative: the refused and unavailable classes are ``DistributedJobError`` too, which takes the outcome.
        super().__init__(message, **({} if outcome is None else {"outcome": outcome}))
        self.status = status

    def __reduce__(self) -> tuple[Any, ...]:
        return type(self), (str(self), self.status), dict(self.__dict__)


class ClusterRefusedError(KubernetesJobError, DistributedJobError):
    """The cluster refused a request for good: the credentials or their permissions (401, 403), or an object it
    will not take (400, 422); the same request fails the same way on a retry."""


class ApiUnavailableError(KubernetesJobError, DistributedJobError):
    """The Kubernetes API could not be reached, or kept answering 429/5xx, past the retry budget."""


#: HTTP statuses of a request the cluster refuses for good: credentials, permissions, an invalid object.
REFUSED_STATUSES = frozenset({400, 401, 403, 422})


def api_error_class(status: int | None, *, unavailable: bool = False) -> type[KubernetesJobError]:
    """The class of a Kubernetes API failure that ends a job: refused (``REFUSED_STATUSES``), unavailable (the
    retries or the reconnect budget ran out on a transient failure), else a plain ``KubernetesJobError``."""
    if status in REFUSED_STATUSES:
        return ClusterRefusedError
    return ApiUnavailableError if unavailable else KubernetesJobError


def error_class_named(name: object) -> type[DistributedJobError] | None:
    """The class of this module named ``name`` (a trigger's event carries the name of the error that ended its
    wait), if it is a ``DistributedJobError``; anything else is ``None``."""
    found = globals().get(name) if isinstance(name, str) and name in __all__ else None
    return found if isinstance(found, type) and issubclass(found, DistributedJobError) else None


__all__ = ["REFUSED_STATUSES", "ApiUnavailableError", "ClusterRefusedError", "DistributedJobError", "ImagePullError",
           "JobHungError", "KubernetesJobError", "ReplicaExitedError", "ReplicaLostError", "ReplicaNotScheduledError",
           "ReplicaNotStartedError", "ReplicaOOMKilledError", "api_error_class", "error_class_named"]

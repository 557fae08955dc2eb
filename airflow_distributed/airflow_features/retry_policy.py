"""The provider's retry policy (Airflow >= 3.3): retry at once what a retry fixes, fail at once what it cannot.

``DistributedTrainingOperator`` and ``@task.distributed`` use it by default when ``retries`` > 0; ``retry_policy=``
replaces it. Airflow evaluates it in the worker on the error the task raised (``exceptions``):

=====================================================  ==========================================================
the task raised                                        the policy
=====================================================  ==========================================================
``ReplicaLostError`` (deleted, evicted, node lost...)  retry at once (no ``retry_delay``): resume from a checkpoint
``JobHungError``                                       retry at once
``ImagePullError``                                     fail now: a retry pulls the same image
``ClusterRefusedError`` (401, 403, an invalid object)  fail now: a retry is refused the same way
``SpecValidationError`` (invalid arguments)            fail now: a retry runs the same arguments
anything else (a script's error, OOM, not started...)  the task's own ``retries`` and ``retry_delay``
=====================================================  ==========================================================

A retry is still one of the task's ``retries``: the policy never adds tries. Importing this module on Airflow < 3.3
(no ``airflow.sdk.RetryPolicy``) raises ``ImportError``; ``default_retry_policy`` then gives ``None``.
"""

from __future__ import annotations

from datetime import timedelta
from typing import TYPE_CHECKING, Any

from airflow.sdk import RetryAction, RetryDecision, RetryPolicy

from airflow_distributed.exceptions import ClusterRefusedError, ImagePullError, JobHungError, ReplicaLostError
from airflow_distributed.spec.errors import SpecValidationError

if TYPE_CHECKING:
    from airflow.sdk import Context

#: (error class, what the policy does, why), first match wins.
RULES: tuple[tuple[type[BaseException], RetryAction, str], ...] = (
    (ReplicaLostError, RetryAction.RETRY, "the cluster took a replica away (deleted, evicted, preempted or its node "
     "lost); retrying at once, from the last checkpoint"),
    (JobHungError, RetryAction.RETRY, "the job hung; retrying at once, from the last checkpoint"),
    (ImagePullError, RetryAction.FAIL, "the image cannot be pulled; not retried: a retry pulls the same image"),
    (ClusterRefusedError, RetryAction.FAIL, "the cluster refused the request; not retried: a retry is refused the "
     "same way"),
    (SpecValidationError, RetryAction.FAIL, "the task's arguments are invalid; not retried: a retry runs the same "
     "arguments"),
)
#: The delay of a retry the policy asks for: at once.
AT_ONCE = timedelta(0)
#: ``serialize()``'s ``__type``.
TYPE_NAME = "airflow_distributed.retry_policy.DistributedRetryPolicy"


class DistributedRetryPolicy(RetryPolicy):
    """Retry a job the cluster interrupted at once, fail one that cannot succeed at once, and leave the rest to the
    task's ``retries`` (``RULES``)."""

    def evaluate(self, exception: BaseException, try_number: int, max_tries: int,
                 context: Context | None = None) -> RetryDecision:
        for kind, action, why in RULES:
            if isinstance(exception, kind):
                reason = f"{type(exception).__name__}: {why}{_about(exception)}"
                if action == RetryAction.RETRY:
                    return RetryDecision.retry(delay=AT_ONCE, reason=reason)
                return RetryDecision.fail(reason=reason)
        return RetryDecision.default()

    def serialize(self) -> dict[str, Any]:
        return {"__type": TYPE_NAME}

    @classmethod
    def deserialize(cls, data: dict[str, Any]) -> DistributedRetryPolicy:
        return cls()

    def __eq__(self, other: object) -> bool:
        return type(other) is type(self)

    def __hash__(self) -> int:
        return hash(TYPE_NAME)

    def __repr__(self) -> str:
        return f"{type(self).__name__}()"


def _about(error: BaseException) -> str:
    """`` (replica x: EvictionByEvictionAPI)``: what the error knows of the replica and why, when it does."""
    replica = getattr(error, "replica", None)
    why = getattr(error, "disruption", None) or getattr(error, "reason", None)
    if replica is None:
        return ""
    return f" (replica {replica}: {why})" if why else f" (replica {replica})"


__all__ = ["AT_ONCE", "RULES", "DistributedRetryPolicy"]

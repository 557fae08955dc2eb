"""One look at a Ray Job judged: where a wait on it stands and what one look adds (``RayPoll``; pure).

Both waits on a Ray Job, the synchronous one (``backends.ray_run.wait_for_job``) and the trigger
(``triggers.ray.RayJobTrigger``), take their decisions here and do only the I/O: the Jobs API's reads, the
renewal of the job's liveness, the pause between two looks. Times are the caller's monotonic clock, passed in.

Rules:

- the wait is over when the job is in one of Ray's final states (``FINAL``), or when the Jobs API has no job of
  that name (``GONE``: deleted while it ran);
- the job's liveness is renewed at the first look and then once ``renew_every`` seconds have passed since the last
  renewal was asked for, whether or not it was answered, and only while the job goes on;
- the Jobs API is unreachable (a dropped or refused connection, a request that timed out) from the first look in
  which a request found it so, until a look whose every request was answered. Unreachable for longer than
  ``reconnect_budget`` seconds, the wait gives up (``OUTAGE``). Every request of a look counts, whichever found the
  API unreachable, the liveness renewal as much as the read of the job's state: a look is one round of what the
  wait owes the job, and one whose renewal did not arrive has not done it (the driver stops a job whose renewals
  stay away for its liveness grace). A look that renews nothing (between two renewals) and is answered ends the
  outage like any other.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Any

#: Ray's job states; the last three are final.
PENDING, RUNNING, STOPPED, SUCCEEDED, FAILED = "PENDING", "RUNNING", "STOPPED", "SUCCEEDED", "FAILED"
FINAL_STATES = frozenset({STOPPED, SUCCEEDED, FAILED})

#: Verdicts of a look: the job is in a final state; it is gone from the cluster; the Jobs API stayed unreachable
#: for longer than the budget.
FINAL, GONE, OUTAGE = "final", "gone", "outage"


def job_ending(info: Mapping[str, Any] | None) -> str | None:
    """``FINAL`` or ``GONE`` if the job's details (``None``: no job of that name) end the wait, else ``None``."""
    if info is None:
        return GONE
    return FINAL if info.get("status") in FINAL_STATES else None


@dataclass(frozen=True)
class RayLook:
    """What one look at a Ray Job read.

    :param info: the job's details as the Jobs API gave them (``None``: it has no job of that name); not looked at
        when ``unreachable``.
    :param unreachable: a request of the look (reading the job, renewing its liveness, reading its log) found the
        Jobs API unreachable.
    :param renewed_at: when the look asked for a renewal of the job's liveness (answered or not), if it did.
    """

    info: Mapping[str, Any] | None = None
    unreachable: bool = False
    renewed_at: float | None = None


@dataclass(frozen=True)
class RayPoll:
    """Where a wait on a Ray Job stands between two looks.

    :param reconnect_budget: seconds the Jobs API may stay unreachable in a row before the wait gives up.
    :param renew_every: seconds between two renewals of the job's liveness (``None``: none).
    :param unreachable_since: when the Jobs API was first found unreachable in this outage, if it is in one.
    :param renewed_at: when the last renewal was asked for, if one was.
    """

    reconnect_budget: float
    renew_every: float | None = None
    unreachable_since: float | None = None
    renewed_at: float | None = None

    def renewal_due(self, now: float) -> bool:
        """Whether the look being made, which found the job going on, renews its liveness now."""
        if self.renew_every is None:
            return False
        return self.renewed_at is None or now - self.renewed_at >= self.renew_every

    def step(self, look: RayLook, now: float) -> tuple[RayPoll, str | None]:
        """The wait after ``look``, made by ``now``, and its verdict (``FINAL``, ``GONE``, ``OUTAGE``; ``None``: look
        again)."""
        renewed_at = self.renewed_at if look.renewed_at is None else look.renewed_at
        if look.unreachable:
            since = now if self.unreachable_since is None else self.unreachable_since
            after = replace(self, unreachable_since=since, renewed_at=renewed_at)
            return after, OUTAGE if now - since > self.reconnect_budget else None
        return replace(self, unreachable_since=None, renewed_at=renewed_at), job_ending(look.info)


__all__ = ["FAILED", "FINAL", "FINAL_STATES", "GONE", "OUTAGE", "PENDING", "RUNNING", "STOPPED", "SUCCEEDED",
           "RayLook", "RayPoll", "job_ending"]

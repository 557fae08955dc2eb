"""An elastic job's restarts on ``backend="kubernetes"``: what the task does when one of its replicas is lost.

The task keeps the restart budget (``elastic.ElasticPlan``) and, for each replica that ended badly, asks
``elastic.after_replica_ended`` what to do: recreate its pod (same name, so the same address), carry on without it,
or let the job fail. ``ElasticRestarts`` is that state of one job (the budget, the replicas the job carries on
without, the runs of the pods it replaced, why it gave up) and travels in a deferral's ``resume_state``. The pod
itself is recreated by the job's run (``kubernetes_run``), which has the job's objects and hook.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass, field, replace
from typing import Any

from airflow_distributed.elastic import CONTINUE, RESTART, ElasticPlan, after_replica_ended
from airflow_distributed.jobstate.outcome import Ending, JobOutcome
from airflow_distributed.jobstate.usage import ReplicaRun, Requests, pod_run
from airflow_distributed.jobstate.verdicts import ReplicaSlot
from airflow_distributed.status import ReplicaState, ReplicaStatus

#: Endings of a replica an elastic job may restart or carry on without.
LOST_REPLICA_ENDINGS = (Ending.EXITED, Ending.POD_FAILED, Ending.DELETED)


@dataclass
class ElasticRestarts:
    """One job's elastic state; a job that is not elastic has no ``plan`` and restarts nothing."""

    #: the job's budget (``None``: not elastic)
    plan: ElasticPlan | None = None
    #: replicas the job carries on without, with their last row of the table
    dropped: dict[str, ReplicaStatus] = field(default_factory=dict)
    #: runs of pods the job replaced or carries on without: what they cost counts in the job's usage
    earlier_runs: list[ReplicaRun] = field(default_factory=list)
    #: why the job gave up, once it has (the failure's reason)
    failure: str | None = None

    @classmethod
    def of_state(cls, state: Mapping[str, Any]) -> ElasticRestarts:
        """Back from a trigger's ``resume_state`` (``state``)."""
        return cls(
            ElasticPlan(**state["elastic"]) if state.get("elastic") else None,
            {row["name"]: ReplicaStatus(**row) for row in state.get("dropped") or []},
            [_run_from_json(row) for row in state.get("earlier_runs") or []],
        )

    def state(self) -> dict[str, Any]:
        """For a trigger's ``resume_state``: the replicas the job carries on without are no longer watched, but the
        final table shows them."""
        return {"elastic": asdict(self.plan) if self.plan is not None else None,
                "dropped": [row.as_dict() for row in self.dropped.values()],
                "earlier_runs": [asdict(run) for run in self.earlier_runs]}

    def watched(self, slots: Sequence[ReplicaSlot]) -> tuple[ReplicaSlot, ...]:
        """The replicas the job still has."""
        return tuple(slot for slot in slots if slot.name not in self.dropped)

    def with_dropped(self, rows: Sequence[ReplicaStatus], slots: Sequence[ReplicaSlot]) -> tuple[ReplicaStatus, ...]:
        """The table's rows in plan order, with the last rows of the replicas the job carries on without."""
        if not self.dropped:
            return tuple(rows)
        by_name = {**self.dropped, **{row.name: row for row in rows}}
        return tuple(row for slot in slots if (row := by_name.get(slot.name)) is not None)

    def after_failure(self, outcome: JobOutcome, slots: Sequence[ReplicaSlot], log: Any,
                      recreate: Callable[[ReplicaSlot, int], None]) -> bool:
        """The answer to a replica that ended badly: ``recreate(slot, restarts)`` its pod, or carry on without it,
        and wait again (``True``); or let the job fail (``False``, the reason kept in ``failure``)."""
        if self.plan is None or outcome.replica is None or outcome.ending not in LOST_REPLICA_ENDINGS:
            return False
        slot = next(s for s in slots if s.name == outcome.replica)
        rows = {row.name: row for row in outcome.replicas}
        restarts = rows[slot.name].restarts
        left = sum(1 for name, row in rows.items()
                   if name != slot.name and row.state in (ReplicaState.RUNNING, ReplicaState.PENDING))
        decision = after_replica_ended(self.plan, name=slot.name, is_master=slot.is_master,
                                       exit_code=outcome.exit_code if outcome.ending == Ending.EXITED else None,
                                       restarts=restarts, left=left)
        log.warning("%s", decision.message)
        if decision.action in (RESTART, CONTINUE):  # the lost pod's run is over: it counts in the job's usage
            self.earlier_runs.append(pod_run(slot.name, outcome.pods.get(slot.name), time.time()))
        if decision.action == RESTART:
            recreate(slot, restarts)
            return True
        if decision.action == CONTINUE:
            self.dropped[slot.name] = rows[slot.name]
            return True
        self.failure = decision.message
        return False

    def failed(self, outcome: JobOutcome) -> JobOutcome:
        """A failed ``outcome`` as the job's: it gave up, when its budget was spent."""
        return replace(outcome, ending=Ending.GAVE_UP, reason=self.failure) if self.failure else outcome


def _run_from_json(row: Mapping[str, Any]) -> ReplicaRun:
    """A ``ReplicaRun`` back from the trigger's event (``asdict`` of it in ``resume_state``)."""
    return ReplicaRun(row["name"], Requests(**row["requests"]), row.get("started"), row.get("ended"),
                      int(row.get("processes") or 1))


__all__ = ["LOST_REPLICA_ENDINGS", "ElasticRestarts"]

"""A job's replicas as slots (whether or not their pods exist yet) and the verdict on how the job ended (pure)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass
from typing import Any

from airflow_distributed.jobstate.outcome import Ending, JobOutcome, describe
from airflow_distributed.status import ReplicaState, ReplicaStatus, plain


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
    """How a job ended: ``state`` is ``ReplicaState.SUCCEEDED`` or ``FAILED``; a failure names the replica and why.

    ``cause`` (an ``Ending``) is ``exit`` (a container exited non-zero), ``pod`` (the pod failed without an exit code),
    ``deleted``, ``image`` (its image cannot be pulled; ``image`` names it), ``startup`` (it did not start within
    the startup timeout) or ``stopped`` (the task was killed). ``disruption`` says how the cluster took the replica
    away, when it did (``pod_disruption``).
    """

    state: ReplicaState
    replica: str | None = None
    cause: Ending | None = None
    exit_code: int | None = None
    reason: str | None = None
    message: str | None = None
    container: str | None = None
    image: str | None = None
    disruption: str | None = None

    def __post_init__(self) -> None:
        # Read from JSON (a trigger's event), the words become the members; a word that is none raises here.
        object.__setattr__(self, "state", ReplicaState(self.state))
        if self.cause is not None:
            object.__setattr__(self, "cause", Ending(self.cause))

    @property
    def succeeded(self) -> bool:
        return self.state == ReplicaState.SUCCEEDED

    def as_dict(self) -> dict[str, Any]:
        return {k: plain(v) for k, v in asdict(self).items() if v is not None}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> JobVerdict:
        return cls(**{k: data[k] for k in cls.__dataclass_fields__ if k in data})

    def outcome(self, replicas: Sequence[ReplicaStatus] = (), **found: Any) -> JobOutcome:
        """The ``JobOutcome`` of this verdict, with the replicas' last statuses and what else was found (``tail``,
        ``events``, ``logs``, ``pods``...)."""
        how = Ending.SUCCEEDED if self.succeeded else (self.cause or Ending.FAILED)
        return JobOutcome(how, tuple(replicas), self.replica, self.exit_code, self.reason, self.message,
                          self.container, self.image, disruption=self.disruption, **found)

    def describe(self, startup_timeout: float | None = None) -> str:
        """One line for the failure message, without the job name (``outcome.describe``)."""
        return describe(self.outcome(), startup_timeout)

"""Replica states and the per-replica table written to the task log (shared by every backend).

``ReplicaState`` is the one set of these words: a replica's state, and a job's (a verdict's ``state``, a result's
``state``, what a reattaching try finds) where a job's is said in the same words.
"""

from __future__ import annotations

import enum
import sys
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass
from typing import Any

if sys.version_info >= (3, 11):
    from enum import StrEnum
else:  # Python 3.10 (what a replica's image may run): ``str()`` of a member is its value, as 3.11's StrEnum

    class StrEnum(str, enum.Enum):
        def __str__(self) -> str:
            return str(self.value)


class ReplicaState(StrEnum):
    """A replica's state (and a job's, in the same words). A member is its string (``ReplicaState.FAILED ==
    "failed"``), so JSON, XCom and messages read as before."""

    PENDING = "pending"
    RUNNING = "running"
    SUCCEEDED = "succeeded"
    FAILED = "failed"
    STOPPED = "stopped"


def plain(value: Any) -> Any:
    """``value`` with a member of one of these string enums as its bare string: what goes into JSON, XCom or a
    trigger's event is exactly what it was before the enums."""
    return value.value if isinstance(value, enum.Enum) else value


@dataclass(frozen=True)
class ReplicaStatus:
    name: str
    role: str
    index: int
    state: ReplicaState
    exit_code: int | None = None
    where: str = ""
    restarts: int = 0
    reason: str | None = None
    #: training processes the replica runs (``n_proc_per_node``); None: one, the usual, which rows leave unsaid
    processes: int | None = None
    #: GPUs the replica asked for (whole devices); None: none
    gpus: int | None = None

    def __post_init__(self) -> None:
        object.__setattr__(self, "state", ReplicaState(self.state))  # read back from JSON: the word is the member
        # A count that says nothing is left out, whoever built the row: the job XCom of most jobs stays as it was.
        if self.processes is not None and self.processes <= 1:
            object.__setattr__(self, "processes", None)
        if self.gpus is not None and self.gpus <= 0:
            object.__setattr__(self, "gpus", None)

    def as_dict(self) -> dict:
        return {k: plain(v) for k, v in asdict(self).items() if v is not None}

    def counts(self) -> dict[str, int]:
        """``{"processes", "gpus"}`` as far as they say something: what a record's row of this replica adds."""
        return {key: value for key, value in (("processes", self.processes), ("gpus", self.gpus)) if value is not None}


def progress_text(progress: Mapping[str, Any]) -> str:
    """``45% (450/1000 steps), about 2 min left`` from a progress record (``tracking.log_progress``), sanitised: a
    value the master reported wrong is ``None`` there, and left out here."""
    step, total, percent = progress.get("step"), progress.get("total"), progress.get("percent")
    parts = [f"{percent:g}%"] if isinstance(percent, (int, float)) else []
    if step is not None and total is not None:  # a Trainer's trainerStatus has a percentage only
        parts.append(f"({step}/{total} steps)")
    text = " ".join(parts) or "progress unknown"
    eta = progress.get("eta_seconds")
    if isinstance(eta, (int, float)) and (step is None or step != total):
        text += f", about {_duration(eta)} left"
    return text


def _duration(seconds: float) -> str:
    if seconds < 60:
        return f"{max(1, round(seconds))} s"
    minutes = round(seconds / 60)
    return f"{minutes} min" if minutes < 60 else f"{minutes // 60} h {minutes % 60:02d} min"


def render_table(rows: Sequence[ReplicaStatus]) -> str:
    """A fixed-width table: role, index, state, where it runs, restarts, exit code (and reason); the processes and
    the GPUs of each replica too, each only when a row has some (a column of ones would say nothing)."""
    processes = any(r.processes is not None for r in rows)
    gpus = any(r.gpus is not None for r in rows)
    header = ("REPLICA", "ROLE", "INDEX", "STATE", "WHERE",
              *(("PROCESSES",) if processes else ()), *(("GPUS",) if gpus else ()), "RESTARTS", "EXIT")
    body = [
        (
            r.name,
            r.role,
            str(r.index),
            # Why a replica waits (Unschedulable, ErrImagePull, ...) is the first thing to look at.
            f"{r.state} ({r.reason})" if r.state == ReplicaState.PENDING and r.reason else r.state,
            r.where or "-",
            *((str(r.processes or 1),) if processes else ()),
            *((str(r.gpus or 0),) if gpus else ()),
            str(r.restarts),
            "-" if r.exit_code is None else str(r.exit_code) + (f" ({r.reason})" if r.reason else ""),
        )
        for r in rows
    ]
    widths = [max(len(line[i]) for line in [header, *body]) for i in range(len(header))]
    return "\n".join("  ".join(cell.ljust(w) for cell, w in zip(line, widths)).rstrip() for line in [header, *body])

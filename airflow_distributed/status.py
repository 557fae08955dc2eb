"""Replica states and the per-replica table written to the task log (shared by every backend)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict, dataclass

PENDING, RUNNING, SUCCEEDED, FAILED, STOPPED = "pending", "running", "succeeded", "failed", "stopped"


@dataclass(frozen=True)
class ReplicaStatus:
    name: str
    role: str
    index: int
    state: str
    exit_code: int | None = None
    where: str = ""
    restarts: int = 0
    reason: str | None = None

    def as_dict(self) -> dict:
        return {k: v for k, v in asdict(self).items() if v is not None}


def render_table(rows: Sequence[ReplicaStatus]) -> str:
    """A fixed-width table: role, index, state, where it runs, restarts, exit code (and reason)."""
    header = ("REPLICA", "ROLE", "INDEX", "STATE", "WHERE", "RESTARTS", "EXIT")
    body = [
        (
            r.name,
            r.role,
            str(r.index),
            # Why a replica waits (Unschedulable, ErrImagePull, ...) is the first thing to look at.
            f"{r.state} ({r.reason})" if r.state == PENDING and r.reason else r.state,
            r.where or "-",
            str(r.restarts),
            "-" if r.exit_code is None else str(r.exit_code) + (f" ({r.reason})" if r.reason else ""),
        )
        for r in rows
    ]
    widths = [max(len(line[i]) for line in [header, *body]) for i in range(len(header))]
    return "\n".join("  ".join(cell.ljust(w) for cell, w in zip(line, widths)).rstrip() for line in [header, *body])

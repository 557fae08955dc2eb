"""What the job view's sources share: the task instance a record is asked for, and the shape of a source.

Its own module so that the sources (``job_state``, ``live_kubernetes``) and the pages name them without importing
each other.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

if TYPE_CHECKING:
    from sqlalchemy.orm import Session


@dataclass(frozen=True)
class TaskInstanceRef:
    """One task instance of ``DistributedTrainingOperator`` (``map_index`` -1 when the task is not mapped)."""

    dag_id: str
    run_id: str
    task_id: str
    map_index: int = -1


@runtime_checkable
class JobStateSource(Protocol):
    """Something that can tell the state of the job a task instance ran or is running."""

    #: Shown with the record (``"recorded"``, ``"live"``), so a reader knows whether it can still change.
    name: str

    def read(self, ref: TaskInstanceRef, session: Session) -> dict[str, Any] | None: ...

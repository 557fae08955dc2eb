"""What the job view's sources share: the shape of a source, asked for the record of a task instance
(``task_instance.TaskInstanceRef``).

Its own module so that the sources (``job_state``, ``live_kubernetes``) and the pages name it without importing
each other.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

if TYPE_CHECKING:
    from sqlalchemy.orm import Session

    from airflow_distributed.task_instance import TaskInstanceRef


@runtime_checkable
class JobStateSource(Protocol):
    """Something that can tell the state of the job a task instance ran or is running."""

    #: Shown with the record (``"recorded"``, ``"live"``), so a reader knows whether it can still change.
    name: str

    def read(self, ref: TaskInstanceRef, session: Session) -> dict[str, Any] | None: ...

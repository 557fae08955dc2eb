"""``TaskInstanceRef``: which task instance of ``DistributedTrainingOperator`` a job or a job view belongs to.

Pure and dependency-free, below the layers that name it: the manifests label a job's objects with it
(``manifests.pod_names.task_labels``), the job view is asked for a record by it (``plugins``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True, kw_only=True)
class TaskInstanceRef:
    """One task instance (``map_index`` -1 when the task is not mapped; ``try_number`` when one try is meant).

    Keyword-only: its ids are all strings, and a run id in the place of a task id would name another task.
    """

    dag_id: str
    task_id: str
    run_id: str
    map_index: int = -1
    try_number: int | None = None

    @classmethod
    def of(cls, ti: Any) -> TaskInstanceRef:
        """From a task instance of the Airflow context (``context["ti"]``)."""
        map_index = getattr(ti, "map_index", None)
        return cls(dag_id=ti.dag_id, task_id=ti.task_id, run_id=ti.run_id,
                   map_index=-1 if map_index is None else map_index, try_number=getattr(ti, "try_number", None))


__all__ = ["TaskInstanceRef"]

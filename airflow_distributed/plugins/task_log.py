"""The replicas' lines of a task instance's job, read from its task log with Airflow's own log reader.

No XCom holds a replica's line (``jobstate.last_lines``): the view shows them only to a viewer the auth manager lets
read the task's logs, and reads them where that permission guards them, through ``TaskLogReader`` (what the task
log page and the REST API's log endpoint read: the local file, the worker's log server while the task runs, or the
remote log store).

Imported with ``app``, on the view's first request, so Airflow's ORM models and log reader are imported at the top.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from airflow.models.taskinstance import TaskInstance
from airflow.utils.log.log_reader import TaskLogReader
from sqlalchemy import select
from sqlalchemy.orm import joinedload

from airflow_distributed.jobstate.last_lines import lines_from_task_log

if TYPE_CHECKING:
    from sqlalchemy.orm import Session

    from airflow_distributed.task_instance import TaskInstanceRef


def task_log_lines(ref: TaskInstanceRef, record: Mapping[str, Any], session: Session) -> dict[str, list[str]]:
    """Each replica's last lines as the task log of the task instance's current try has them: its closing block,
    or while the job runs the lines the task relayed; empty when the log has neither or cannot be read."""
    ti = session.scalar(
        select(TaskInstance)
        .where(TaskInstance.dag_id == ref.dag_id, TaskInstance.run_id == ref.run_id,
               TaskInstance.task_id == ref.task_id, TaskInstance.map_index == ref.map_index)
        .options(joinedload(TaskInstance.dag_run), joinedload(TaskInstance.dag_model))
    )
    reader = TaskLogReader()
    if ti is None or not ti.try_number or not reader.supports_read:
        return {}
    messages, _ = reader.read_log_chunks(ti, ti.try_number, {"end_of_log": False})
    replicas = [row["name"] for row in record.get("replicas") or []
                if isinstance(row, Mapping) and isinstance(row.get("name"), str)]
    found = lines_from_task_log(str(record.get("job_name") or ""), replicas,
                                (str(getattr(message, "event", "") or "") for message in messages))
    return found or {}

"""Where the job view reads a job's state from: the recorded ``job`` XCom, then the live sources.

A source answers for one task instance with a record in the shape of the operator's ``job`` XCom
(``job_name``, ``state``, ``replicas``, ``metrics``, ``history``...) or ``None`` when it knows nothing of that job;
the live cluster source adds ``logs``, the master's lines it read from the pod (the view shows them, or the task
log's, only to a viewer who may read the task's logs). The view asks its sources in order and shows the first
answer: a finished job's record stays the final word; while there is none, a cluster job's pods and live record
(``live_kubernetes``: the ``kubernetes``, ``kubeflow`` and ``trainjob`` backends) or a running job's published
record (``job_live``: local) answer.

Imported with ``app``, on the view's first request (``plugin.JobViewApp``), so Airflow's ORM models are imported
at the top.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from airflow.models.taskinstance import TaskInstance
from airflow.models.xcom import XComModel
from sqlalchemy import select

from airflow_distributed.plugins.job_source import JobStateSource
from airflow_distributed.plugins.live_kubernetes import LiveKubernetesJobState
from airflow_distributed.task_instance import TaskInstanceRef

if TYPE_CHECKING:
    from sqlalchemy.orm import Session

#: The XCom key the operator writes its job record under, success or failure.
JOB_XCOM_KEY = "job"
#: The XCom key of a running local job's record (``backends.local_live``).
LIVE_XCOM_KEY = "job_live"


class RecordedJobState:
    """The ``job`` XCom the operator pushes when the job ends, read with Airflow's XCom model.

    With ``key="job_live"`` and ``name="live"``: the record a running local job publishes as it goes.
    """

    def __init__(self, key: str = JOB_XCOM_KEY, name: str = "recorded") -> None:
        self.key, self.name = key, name

    def read(self, ref: TaskInstanceRef, session: Session) -> dict[str, Any] | None:
        query = XComModel.get_many(
            run_id=ref.run_id, key=self.key, dag_ids=ref.dag_id, task_ids=ref.task_id,
            map_indexes=ref.map_index, limit=1,
        )
        row: Any = session.scalars(query).first()
        return None if row is None else decode_record(row.value)


def decode_record(value: Any) -> dict[str, Any] | None:
    """The record stored in the XCom table, or None when it is not one.

    Plain JSON is read as it is, never through ``XComModel.deserialize_value``: that may instantiate classes
    named in the stored value, and a view must not run anything a task wrote. A custom XCom backend stores a
    reference instead of the record; that is "not found" here rather than an error.
    """
    if isinstance(value, (str, bytes)):
        try:
            value = json.loads(value)
        except ValueError:
            return None
    if not isinstance(value, Mapping) or "replicas" not in value:
        return None
    # A record an older release wrote held the replicas' last lines; they are the task log's to show, not an XCom's.
    return {key: item for key, item in value.items() if key != "logs"}


def read_job(
    ref: TaskInstanceRef, session: Session, sources: Sequence[JobStateSource]
) -> tuple[dict[str, Any], str] | None:
    """The first source's record for ``ref`` and that source's name, or None when no source has one."""
    for source in sources:
        record = source.read(ref, session)
        if record is not None:
            return record, source.name
    return None


def task_instance_state(ref: TaskInstanceRef, session: Session) -> str | None:
    """The task instance's state (``"running"``, ``"failed"``...); ``"none"`` when unset; None when there is none."""
    row = session.execute(
        select(TaskInstance.state).where(
            TaskInstance.dag_id == ref.dag_id,
            TaskInstance.run_id == ref.run_id,
            TaskInstance.task_id == ref.task_id,
            TaskInstance.map_index == ref.map_index,
        )
    ).first()
    if row is None:
        return None
    return str(row[0].value if hasattr(row[0], "value") else row[0]) if row[0] is not None else "none"


#: The final record first; while there is none, a cluster job as the cluster has it (its pods, the master's live
#: record and a TrainJob's trainerStatus, which is more than the task publishes), then a published record (local).
DEFAULT_SOURCES: tuple[JobStateSource, ...] = (
    RecordedJobState(), LiveKubernetesJobState(), RecordedJobState(key=LIVE_XCOM_KEY, name="live"),
)

"""Where the job view reads a job's state from: the recorded ``job`` XCom now, a live backend source later.

A source answers for one task instance with a record in the shape of the operator's ``job`` XCom
(``job_name``, ``state``, ``replicas``, ``metrics``, ``history``, ``logs``...) or ``None`` when it knows nothing
of that job. The view asks its sources in order and shows the first answer, so a live source (a running
Kubernetes job's pods, read through the backend's hook) is added by appending it after ``RecordedJobState``:
a finished job's record stays the final word, a running job is answered by the live source.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

if TYPE_CHECKING:
    from sqlalchemy.orm import Session

#: The XCom key the operator writes its job record under, success or failure.
JOB_XCOM_KEY = "job"
#: The XCom key of a running local job's record (``backends.local_live``).
LIVE_XCOM_KEY = "job_live"


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


class RecordedJobState:
    """The ``job`` XCom the operator pushes when the job ends, read with Airflow's XCom model.

    With ``key="job_live"`` and ``name="live"``: the record a running local job publishes as it goes.
    """

    def __init__(self, key: str = JOB_XCOM_KEY, name: str = "recorded") -> None:
        self.key, self.name = key, name

    def read(self, ref: TaskInstanceRef, session: Session) -> dict[str, Any] | None:
        from airflow.models.xcom import XComModel

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
    return dict(value)


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
    from airflow.models.taskinstance import TaskInstance
    from sqlalchemy import select

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


class LiveKubernetesJobState:
    """A running Kubernetes job, read from its pods while the task has not recorded a final state.

    The operator announces the job (name, namespace, connection) in a small XCom when it starts waiting;
    this source lists the job's pods by label through the backend's hook and shows their current states
    and the master's last log lines.
    """

    name = "live"

    def read(self, ref: TaskInstanceRef, session: Session) -> dict[str, Any] | None:
        from airflow.models.xcom import XComModel

        query = XComModel.get_many(
            run_id=ref.run_id, key="kubernetes_job", dag_ids=ref.dag_id, task_ids=ref.task_id,
            map_indexes=ref.map_index, limit=1,
        )
        row: Any = session.scalars(query).first()
        announced = None if row is None else _decode_json(row.value)
        if not isinstance(announced, Mapping) or "job_name" not in announced:
            return None
        return live_record(announced, _list_pods(announced))


def _decode_json(value: Any) -> Any:
    if isinstance(value, (str, bytes)):
        try:
            return json.loads(value)
        except ValueError:
            return None
    return value


def _list_pods(announced: Mapping[str, Any]) -> tuple[list[dict[str, Any]], dict[str, list[str]]]:
    from airflow_distributed.hooks.kubernetes import DistributedTrainingHook

    hook = DistributedTrainingHook(kubernetes_conn_id=announced.get("kubernetes_conn_id"))
    pods = hook.list_job_pods(announced["namespace"], announced["job_name"]).get("items") or []
    logs: dict[str, list[str]] = {}
    for pod in pods:
        labels = (pod.get("metadata") or {}).get("labels") or {}
        if labels.get("airflow-distributed/master") == "true":
            name = pod["metadata"]["name"]
            try:
                logs[name] = hook.read_log_tail(announced["namespace"], name)
            except Exception:
                logs[name] = []
    return pods, logs


def live_record(
    announced: Mapping[str, Any], pods_and_logs: tuple[list[dict[str, Any]], dict[str, list[str]]]
) -> dict[str, Any]:
    """A job record in the shape of the ``job`` XCom, from the pods' current states (pure)."""
    from airflow_distributed.jobstate.job_watch import ReplicaSlot, replica_status

    pods, logs = pods_and_logs
    rows = []
    for pod in pods:
        meta = pod.get("metadata") or {}
        labels = meta.get("labels") or {}
        slot = ReplicaSlot(meta.get("name", ""), labels.get("airflow-distributed/role", ""),
                           int(labels.get("airflow-distributed/index", 0)),
                           labels.get("airflow-distributed/master") == "true")
        rows.append((not slot.is_master, slot.role, slot.index, replica_status(slot, pod)))
    rows.sort(key=lambda row: row[:3])
    return {
        "job_name": announced["job_name"],
        "framework": announced.get("framework"),
        "backend": "kubernetes",
        "namespace": announced["namespace"],
        "state": "running",
        "metrics": {},
        "model_path": None,
        "history": [],
        "replicas": [
            {"name": s.name, "role": s.role, "index": s.index, "state": s.state, "exit_code": s.exit_code,
             "where": s.where, "reason": s.reason, "restarts": s.restarts}
            for *_, s in rows
        ],
        "logs": logs,
    }


# The recorded state first: once a job has ended its record is the final word; until then, the live pods.
#: The final record first; while there is none, a running local job's published record, then a Kubernetes job's pods.
DEFAULT_SOURCES: tuple[JobStateSource, ...] = (
    RecordedJobState(), RecordedJobState(key=LIVE_XCOM_KEY, name="live"), LiveKubernetesJobState(),
)

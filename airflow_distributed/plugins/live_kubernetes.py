"""The job view's live source for ``backend="kubernetes"``: a running job's pods, read where the DAG says it runs.

The view runs in the API server and reads the cluster with a connection's credentials, so nothing a task or a
user wrote decides where it looks:

- the job name is the one the task instance derives (``naming.job_name``); the ``kubernetes_job`` XCom the
  operator pushes while it waits only says that the job has started, and one naming another job is ignored;
- the backend and the connection id come from the task in the serialized DAG of the task instance's DAG version,
  the namespace from there too, or from the task instance's rendered fields when the DAG templates it;
- the connection is resolved with the DAG's team (``[core] multi_team``), as the task's own worker resolves it;
- the reads are time-boxed (``timeout``): a cluster that does not answer gives the state ``unreachable``.

Only the API server imports this module, when the view serves its first request (``plugin.JobViewApp`` builds the
app then): so the Kubernetes client, the hooks and Airflow's ORM models are imported here at the top.
"""

from __future__ import annotations

import json
import time
from collections.abc import Mapping
from concurrent.futures import ThreadPoolExecutor
from concurrent.futures import TimeoutError as FutureTimeout
from dataclasses import dataclass, replace
from functools import cached_property
from typing import TYPE_CHECKING, Any

from airflow.configuration import conf
from airflow.exceptions import AirflowNotFoundException
from airflow.models.connection import Connection
from airflow.models.dag import DagModel
from airflow.models.dag_version import DagVersion
from airflow.models.renderedtifields import RenderedTaskInstanceFields as Rendered
from airflow.models.taskinstance import TaskInstance
from airflow.models.xcom import XComModel
from kubernetes import client
from sqlalchemy import select

from airflow_distributed.backends.base import has_template
from airflow_distributed.backends.job_run import LIVE_JOB_XCOM_KEY, TAIL_LINES
from airflow_distributed.frameworks import all_frameworks
from airflow_distributed.hooks.api_retry import KubernetesJobError, RetryPolicy, is_connection_error
from airflow_distributed.hooks.kubeflow import KubeflowJobHook
from airflow_distributed.hooks.kubernetes import PodJobHook
from airflow_distributed.hooks.trainjob import TRAINJOB, TrainJobHook
from airflow_distributed.jobstate.pending_pods import SUSPENDED, condition_since
from airflow_distributed.jobstate.pod_state import replica_status
from airflow_distributed.jobstate.replica_table import queue_note_of, wait_note
from airflow_distributed.jobstate.usage import usage_so_far
from airflow_distributed.jobstate.verdicts import ReplicaSlot
from airflow_distributed.manifests.kubeflow_kinds import kubeflow_resource
from airflow_distributed.manifests.kubeflow_status import job_suspended
from airflow_distributed.manifests.pod_names import INDEX_LABEL, MASTER_LABEL, ROLE_LABEL
from airflow_distributed.manifests.trainjob_status import trainer_progress, trainjob_suspended
from airflow_distributed.naming import job_name
from airflow_distributed.outputs import DOCUMENT_LIMIT, sanitise_document
from airflow_distributed.replica.live_report import latest_record, without_records
from airflow_distributed.strict_json import StrictJson

if TYPE_CHECKING:
    from sqlalchemy.orm import Session

    from airflow_distributed.task_instance import TaskInstanceRef

#: The master's role of each framework (``Framework.master_role``): a Kubeflow job's replica rows and a TrainJob's
#: node rows name their replicas by role, so the row of one of these is the master's.
MASTER_ROLES = frozenset(fw.master_role for fw in all_frameworks())
#: Seconds the view waits for the Kubernetes API, unless ``[distributed] live_view_timeout`` says otherwise.
DEFAULT_TIMEOUT = 5.0
#: The backends whose running jobs the view reads from the cluster.
CLUSTER_BACKENDS = ("kubernetes", "kubeflow", "trainjob")
#: The cncf provider's default connection: when it is not defined, the client's own configuration is used.
DEFAULT_CONN_ID = "kubernetes_default"
#: The master's log the view reads for its live record: its last lines, and no more than these bytes of them.
RECORD_TAIL_LINES = 200
RECORD_TAIL_BYTES = 2**20
# Reads of hung clusters end at the time box; a bounded pool keeps them from piling up threads.
_READERS = ThreadPoolExecutor(max_workers=4, thread_name_prefix="job-view-kubernetes")


@dataclass(frozen=True)
class JobLocation:
    """Where a task instance's Kubernetes job runs, from its DAG (``namespace`` None: the connection's default)."""

    job_name: str
    namespace: str | None
    conn_id: str | None
    team: str | None
    #: ``kubernetes``, ``kubeflow`` or ``trainjob``, and the framework (it names a Kubeflow job's kind)
    backend: str = "kubernetes"
    framework: str | None = None


class Unavailable(Exception):
    """The live state cannot be read; the message says why, in words fit for any viewer (no address, no secret)."""

    def __init__(self, state: str, message: str) -> None:
        super().__init__(message)
        self.state = state


def unreachable(timeout: float) -> Unavailable:
    return Unavailable("unreachable", f"The Kubernetes API could not be reached within {timeout:g} s; the page "
                       "tries again when it reloads.")


def configured_timeout() -> float:
    return conf.getfloat("distributed", "live_view_timeout", fallback=DEFAULT_TIMEOUT)


class LiveKubernetesJobState:
    """A running Kubernetes job, read from its pods while the task has not recorded a final state.

    :param timeout: seconds to wait for the Kubernetes API; default ``[distributed] live_view_timeout`` (5).
    """

    name = "live"

    def __init__(self, timeout: float | None = None) -> None:
        self._timeout = timeout

    @property
    def timeout(self) -> float:
        return configured_timeout() if self._timeout is None else self._timeout

    def read(self, ref: TaskInstanceRef, session: Session) -> dict[str, Any] | None:
        announced = _xcom(ref, session)
        if not isinstance(announced, Mapping):
            return None
        location = job_location(ref, session)
        # Only this task instance's own job: an announcement naming another one is not this view's business.
        if location is None or announced.get("job_name") != location.job_name:
            return None
        framework = announced.get("framework") if isinstance(announced.get("framework"), str) else None
        if location.framework is None and framework is not None:
            # A framework the Dag leaves to its spec: the job's kind is the announced one's, of the same job, namespace
            # and connection whatever it says.
            location = replace(location, framework=framework)
        timeout = self.timeout
        try:
            extras = connection_extras(location)
            reader = read_pods if location.backend == "kubernetes" else read_kubeflow_pods
            future = _READERS.submit(reader, location, extras, timeout)
            try:
                namespace, pods, logs, report = future.result(timeout=timeout)
            except FutureTimeout:
                future.cancel()
                raise unreachable(timeout) from None
        except Unavailable as why:
            return unavailable_record(location, framework, why)
        if location.backend != "kubernetes":
            return kubeflow_live_record(location, namespace, framework, pods, logs, report)
        return live_record(location.job_name, namespace, framework, pods, logs, report)


def _xcom(ref: TaskInstanceRef, session: Session) -> Any:
    query = XComModel.get_many(run_id=ref.run_id, key=LIVE_JOB_XCOM_KEY, dag_ids=ref.dag_id, task_ids=ref.task_id,
                               map_indexes=ref.map_index, limit=1)
    row: Any = session.scalars(query).first()
    if row is None:
        return None
    value = row.value
    if isinstance(value, (str, bytes)):
        try:
            return json.loads(value)
        except ValueError:
            return None
    return value


def job_location(ref: TaskInstanceRef, session: Session) -> JobLocation | None:
    """Where the task instance's job runs, from the task in its DAG version (None: not a Kubernetes job)."""
    fields = task_fields(ref, session)
    if fields is None or fields.get("backend") not in CLUSTER_BACKENDS or "kubernetes_conn_id" in fields["_expanded"]:
        return None
    namespace = fields.get("namespace")
    if has_template(namespace) or "namespace" in fields["_expanded"]:
        namespace = rendered_field(ref, session, "namespace")
        if namespace is None or has_template(namespace):
            return None  # not rendered yet: the task has not started
    if namespace is not None and not isinstance(namespace, str):
        return None
    conn_id = fields.get("kubernetes_conn_id")
    if conn_id is not None and not isinstance(conn_id, str):
        return None
    # Teams own connections only in multi-team mode; outside it, Airflow refuses a team name outright.
    team = DagModel.get_team_name(ref.dag_id, session=session) if conf.getboolean("core", "multi_team") else None
    framework = fields.get("framework") if isinstance(fields.get("framework"), str) else None
    return JobLocation(job_name(ref.dag_id, ref.task_id, ref.run_id, ref.map_index), namespace or None, conn_id, team,
                       str(fields["backend"]), framework)


def task_fields(ref: TaskInstanceRef, session: Session) -> dict[str, Any] | None:
    """The task's arguments in the serialized DAG its task instance runs with, plain values only.

    ``_expanded`` names the arguments a mapped task expands (their values are known per task instance only).
    A DAG serialized before the operator kept ``backend`` has none: such a task is not read live.
    """
    version_id = session.scalar(select(TaskInstance.dag_version_id).where(
        TaskInstance.dag_id == ref.dag_id, TaskInstance.run_id == ref.run_id, TaskInstance.task_id == ref.task_id,
        TaskInstance.map_index == ref.map_index,
    ))
    version = None if version_id is None else session.get(DagVersion, version_id)
    serialized = None if version is None else version.serialized_dag
    data = None if serialized is None else serialized.data
    tasks = ((data or {}).get("dag") or {}).get("tasks") or []
    for entry in tasks:
        task = entry.get("__var") if isinstance(entry, Mapping) else None
        if isinstance(task, Mapping) and task.get("task_id") == ref.task_id:
            partial = _mapping(task.get("partial_kwargs"))
            expanded = _mapping(_mapping(task.get("expand_input")).get("value"))
            # A mapped task keeps the arguments given to partial(); those not given have the operator's defaults.
            defaults = {"kubernetes_conn_id": DEFAULT_CONN_ID} if task.get("_is_mapped") else {}
            return {**defaults, **partial, **task, "_expanded": set(expanded)}
    return None


def _mapping(value: Any) -> Mapping[str, Any]:
    return value if isinstance(value, Mapping) else {}


def rendered_field(ref: TaskInstanceRef, session: Session, field: str) -> Any:
    """A template field as the task instance rendered it (Airflow's rendered task instance fields)."""
    fields = session.scalar(select(Rendered.rendered_fields).where(
        Rendered.dag_id == ref.dag_id, Rendered.run_id == ref.run_id, Rendered.task_id == ref.task_id,
        Rendered.map_index == ref.map_index,
    ))
    return fields.get(field) if isinstance(fields, Mapping) else None


def connection_extras(location: JobLocation) -> dict[str, Any]:
    """The connection's extras, resolved as the DAG's team resolves it; ``{}`` for the client's own configuration
    (no connection, or ``kubernetes_default`` not defined, as in the cncf provider)."""
    if location.conn_id is None:
        return {}
    try:
        connection = Connection.get_connection_from_secrets(location.conn_id, team_name=location.team)
    except AirflowNotFoundException:
        if location.conn_id == DEFAULT_CONN_ID:
            return {}
        owner = f" for team {location.team}" if location.team else ""
        raise Unavailable("unavailable", f"The connection {location.conn_id} is not defined{owner}.") from None
    extras = connection.extra_dejson
    return dict(extras) if isinstance(extras, Mapping) else {}


def read_pods(location: JobLocation, extras: Mapping[str, Any], timeout: float
              ) -> tuple[str, list[dict[str, Any]], dict[str, list[str]], dict[str, Any] | None]:
    """The job's namespace, pods, the master's last log lines and its newest live record (``live_report``), read
    through the resolved connection, each request ending after ``timeout`` seconds.

    The master's log is read once: its last ``RECORD_TAIL_LINES`` lines, of which the API server sends the first
    ``RECORD_TAIL_BYTES`` at most. ``tracking`` prints a record every few seconds while the master reports, so the
    window holds one unless the master printed more than that in between; then the view shows the pods only."""
    try:
        hook = _connection_hook(extras, location.conn_id, timeout)
        namespace = location.namespace or hook.default_namespace()
        pods = hook.list_job_pods(namespace, location.job_name).get("items") or []
        logs: dict[str, list[str]] = {}
        report: dict[str, Any] | None = None
        for pod in pods:
            meta = pod.get("metadata") or {}
            if (meta.get("labels") or {}).get(MASTER_LABEL) == "true" and meta.get("name"):
                logs[meta["name"]], report = _master_tail(hook, namespace, meta["name"])
    except KubernetesJobError as error:
        if error.status is None:
            raise unreachable(timeout) from None
        raise Unavailable("unavailable", f"The Kubernetes API answered {error.status} to listing the job's pods."
                          ) from None
    except Exception as error:
        if is_connection_error(error):
            raise unreachable(timeout) from None
        raise Unavailable("unavailable", "The connection's Kubernetes configuration could not be loaded.") from None
    return namespace, pods, logs, report


def _master_tail(hook: Any, namespace: str, pod: str, container: str | None = None) -> tuple[list[str], Any]:
    """The master's last lines without its live records, and its newest live record: one bounded read (an
    unreadable log gives neither)."""
    where = {"container": container} if container is not None else {}
    try:
        lines = hook.read_log_tail(namespace, pod, RECORD_TAIL_LINES, limit_bytes=RECORD_TAIL_BYTES, **where)
    except KubernetesJobError:
        lines = []
    return without_records(lines)[-TAIL_LINES:], latest_record(lines)


def _connection_hook(extras: Mapping[str, Any], conn_id: str | None, timeout: float, base: Any = None) -> Any:
    """A ``PodJobHook`` (or ``base``, a Kubeflow kind's hook) on already resolved extras, one try per
    call (the view reloads itself), each request bounded by ``timeout``."""
    class ResolvedConnectionHook(base or PodJobHook):  # type: ignore[misc]
        @cached_property
        def conn_extras(self) -> dict[str, Any]:
            return dict(extras)

        def get_conn(self) -> Any:
            api = super().get_conn()
            send = api.call_api

            # Every request ends with the view's time box, so a silent cluster holds no reader thread past it.
            def call_api(*args: Any, **kwargs: Any) -> Any:
                kwargs["_request_timeout"] = timeout
                return send(*args, **kwargs)

            api.call_api = call_api
            return api

    # A fresh configuration per hook: loading a kubeconfig must not rewrite the process-wide default, which the
    # API server shares between teams. The cncf hook's in_cluster path only loads into the default.
    configuration = None if extras.get("in_cluster") else client.Configuration()
    return ResolvedConnectionHook(kubernetes_conn_id=conn_id, client_configuration=configuration,
                                  retry=RetryPolicy(attempts=1), max_concurrency=1)


def _index(value: Any) -> int:
    try:
        return int(value)
    except (TypeError, ValueError):
        return 0


def live_record(name: str, namespace: str, framework: str | None, pods: list[dict[str, Any]],
                logs: dict[str, list[str]], report: Mapping[str, Any] | None = None,
                now: float | None = None) -> dict[str, Any]:
    """A job record in the shape of the ``job`` XCom, from the pods' current states and the master's newest live
    record (progress, metrics, history so far), sanitised as every report is, and the try's usage so far (pure but
    for the clock: ``now`` defaults to the current time)."""
    rows = []
    for pod in pods:
        meta = pod.get("metadata") or {}
        labels = meta.get("labels") or {}
        slot = ReplicaSlot(str(meta.get("name", "")), str(labels.get(ROLE_LABEL, "")),
                           _index(labels.get(INDEX_LABEL)), labels.get(MASTER_LABEL) == "true")
        rows.append((not slot.is_master, slot.role, slot.index, replica_status(slot, pod), pod))
    rows.sort(key=lambda row: row[:3])
    document = sanitise_document(report or {})
    # Why the job waits for capacity, and since when, as the task log says it.
    queued = queue_note_of([(row[3].name, row[4]) for row in rows])
    return {
        **({"note": f"Waiting for capacity: {queued}"} if queued else {}),
        "job_name": name, "framework": framework, "backend": "kubernetes", "namespace": namespace,
        "state": "running", "metrics": document["metrics"], "model_path": None, "history": document["history"],
        **({"progress": document["progress"]} if document.get("progress") else {}),
        "replicas": [
            {"name": s.name, "role": s.role, "index": s.index, "state": s.state, "exit_code": s.exit_code,
             "where": s.where, "reason": s.reason, "restarts": s.restarts, **s.counts()}
            for *_, s, _ in rows
        ],
        "logs": logs,
        "usage": usage_so_far([(row[3].name, row[4]) for row in rows], time.time() if now is None else now),
    }


def unavailable_record(location: JobLocation, framework: str | None, why: Unavailable) -> dict[str, Any]:
    """The record of a job whose pods could not be read: the state says so, the note says why."""
    return {
        "job_name": location.job_name, "framework": framework, "backend": "kubernetes",
        "namespace": location.namespace, "state": why.state, "note": str(why), "metrics": {}, "model_path": None,
        "history": [], "replicas": [], "logs": {},
    }


def read_kubeflow_pods(location: JobLocation, extras: Mapping[str, Any], timeout: float
                       ) -> tuple[str, Any, dict[str, list[str]], dict[str, Any] | None]:
    """A Kubeflow job's or a TrainJob's namespace, ``(object, replica rows, usage so far, why it waits for
    capacity)``, the master's last log lines and its newest live record, read as ``read_pods`` reads a Kubernetes
    job's (one object read, one pod list, one log)."""
    try:
        trainjob = location.backend == "trainjob"
        hook = _connection_hook(extras, location.conn_id, timeout, TrainJobHook if trainjob else KubeflowJobHook)
        namespace = location.namespace or hook.default_namespace()
        resource = TRAINJOB if trainjob else kubeflow_resource(location.framework or "pytorch")
        obj = hook.get_kubeflow_job(namespace, resource, location.job_name)
        if obj is None:
            return namespace, (None, (), None, None), {}, None
        pods = hook.kubeflow_pods(namespace, obj)
        container = hook.main_container(obj)
        rows = hook.replica_statuses(pods, container)
        named = [(str((pod.get("metadata") or {}).get("name", "")), pod) for pod in pods]
        usage = usage_so_far(named, time.time())
        queued = queue_note_of(sorted(named, key=lambda pair: pair[0]))
        logs: dict[str, list[str]] = {}
        report: dict[str, Any] | None = None
        master = next((row for row in rows if row.role in MASTER_ROLES), rows[0] if rows else None)
        if master is not None:
            logs[master.name], report = _master_tail(hook, namespace, master.name, container)
    except KubernetesJobError as error:
        if error.status is None:
            raise unreachable(timeout) from None
        raise Unavailable("unavailable", f"The Kubernetes API answered {error.status} to reading the job."
                          ) from None
    except Exception as error:
        if is_connection_error(error):
            raise unreachable(timeout) from None
        raise Unavailable("unavailable", "The connection's Kubernetes configuration could not be loaded.") from None
    return namespace, (obj, rows, usage, queued), logs, report


def kubeflow_live_record(location: JobLocation, namespace: str, framework: str | None, found: Any,
                         logs: dict[str, list[str]], report: Mapping[str, Any] | None) -> dict[str, Any]:
    """A running Kubeflow job or TrainJob in the shape of the ``job`` XCom (pure): its replicas from its pods, the
    master's newest live record; a TrainJob without one shows its ``status.trainerStatus`` (behind the
    ``TrainJobStatus`` feature gate), which it shows besides in any case."""
    obj, rows, usage, queued = found
    if obj is not None and (job_suspended(obj) or trainjob_suspended(obj)):
        # As the task log says it (``PendingPods``), with the job's own Suspended time when it records one.
        queued = wait_note("the job waits to be admitted (suspended)", condition_since(obj, "Suspended") or "?",
                           "Suspended", SUSPENDED)
    document = sanitise_document(report or {})
    record: dict[str, Any] = {
        **({"note": f"Waiting for capacity: {queued}"} if queued else {}),
        "job_name": location.job_name, "framework": framework, "backend": location.backend, "namespace": namespace,
        "state": "running", "metrics": document["metrics"], "model_path": None, "history": document["history"],
        **({"progress": document["progress"]} if document.get("progress") else {}),
        "replicas": [
            {"name": s.name, "role": s.role, "index": s.index, "state": s.state, "exit_code": s.exit_code,
             "where": s.where, "reason": s.reason, "restarts": s.restarts, **s.counts()}
            for s in rows
        ],
        "logs": logs,
        **({"usage": usage} if usage is not None else {}),
    }
    if location.backend == "trainjob" and obj is not None:
        progress = trainer_progress(obj)
        if progress is not None:
            trainer = sanitise_document({"metrics": dict(progress.metrics),
                                         "progress": {"percent": progress.percent,
                                                      "eta_seconds": progress.remaining_seconds}})
            # as the task's own live record of a TrainJob has it (``backends.trainjob.live_record``), strict JSON
            status = StrictJson(DOCUMENT_LIMIT).clean(progress.as_dict(), "trainer_status")
            record["trainer_status"] = status if isinstance(status, dict) else {}
            if "progress" not in record and trainer.get("progress"):
                record["progress"], record["metrics"] = trainer["progress"], record["metrics"] or trainer["metrics"]
    return record

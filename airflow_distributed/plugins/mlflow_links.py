"""The job view's links to a task instance's MLflow run and registered model version (``mlflow_conn_id=``).

Built from what the DAG and its connection say, never from what a task or a user wrote: the task's extra link is
an XCom (``_link_MlflowRunLink``), which the REST API lets a user write, so the view does not read it. Instead:

- the connection id, the experiment and the registered model's name come from the task in the serialized DAG of the
  task instance's DAG version, or from its rendered fields when the DAG templates them (``live_kubernetes``'s rule);
- the connection is resolved with the DAG's team, as the task's worker resolves it;
- the run is the one the tracking server holds under the task instance's key (``mlflow_run.RunKey``: its ids and
  the first try since its last clear, from the task instance row), found with one search, so the link opens the run
  of the clear the view shows; the version is the run's own ``model_version`` tag, shown only when it names the
  DAG's ``register_model``;
- the reads are one try each, time-boxed by ``[distributed] live_view_timeout``; a server that does not answer gives
  a note without its address, and the page's reload tries again.

The page shows the links only to a viewer the view itself admits (one who may read the DAG's XComs).
"""

from __future__ import annotations

from collections.abc import Mapping
from concurrent.futures import ThreadPoolExecutor
from concurrent.futures import TimeoutError as FutureTimeout
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from airflow.configuration import conf
from airflow.exceptions import AirflowNotFoundException
from airflow.models.connection import Connection
from airflow.models.dag import DagModel
from airflow.models.taskinstance import TaskInstance
from sqlalchemy import select

from airflow_distributed.backends.base import has_template
from airflow_distributed.hooks.mlflow import MlflowApiError, MlflowHook
from airflow_distributed.mlflow_run import (
    MODEL_VERSION_TAG,
    RunKey,
    first_try_since_clear,
    model_version_of,
    model_version_url,
    run_url,
)
from airflow_distributed.plugins.live_kubernetes import configured_timeout, rendered_field, task_fields

if TYPE_CHECKING:
    from sqlalchemy.orm import Session

    from airflow_distributed.task_instance import TaskInstanceRef

# Reads of a silent tracking server end at the time box; a bounded pool keeps them from piling up threads.
_READERS = ThreadPoolExecutor(max_workers=2, thread_name_prefix="job-view-mlflow")


@dataclass(frozen=True)
class MlflowLinks:
    """What the view shows of a task instance's MLflow run: its page and its registered version's, or a note why
    there is none (no address, no secret in it)."""

    run_url: str | None = None
    model_version: str | None = None
    model_version_url: str | None = None
    note: str | None = None


@dataclass(frozen=True)
class _Tracking:
    conn_id: str
    experiment: str
    register_model: str | None
    key: RunKey
    team: str | None


def mlflow_links(ref: TaskInstanceRef, session: Session, timeout: float | None = None) -> MlflowLinks | None:
    """The links of the task instance's MLflow run; None when its task logs to no tracking server."""
    tracking = _tracking(ref, session)
    if tracking is None:
        return None
    timeout = configured_timeout() if timeout is None else timeout
    try:
        connection = Connection.get_connection_from_secrets(tracking.conn_id, team_name=tracking.team)
    except AirflowNotFoundException:
        return MlflowLinks(note=f"MLflow: the connection {tracking.conn_id} is not defined.")
    future = _READERS.submit(_find_run, tracking, connection, timeout)
    try:
        return future.result(timeout=timeout * 2 + 1)  # two requests, each bounded by the hook's timeout
    except FutureTimeout:
        future.cancel()
        return MlflowLinks(note=_unreachable(timeout))


def _unreachable(timeout: float) -> str:
    return f"MLflow: the tracking server did not answer within {timeout:g} s; the page tries again when reloaded."


def _tracking(ref: TaskInstanceRef, session: Session) -> _Tracking | None:
    fields = task_fields(ref, session)
    if fields is None:
        return None
    values: dict[str, str | None] = {}
    for name in ("mlflow_conn_id", "mlflow_experiment", "register_model"):
        value = fields.get(name)
        if name in fields["_expanded"] or has_template(value):
            value = rendered_field(ref, session, name)
            if has_template(value):
                return None  # not rendered yet: the task has not started
        values[name] = value if isinstance(value, str) and value else None
    conn_id = values["mlflow_conn_id"]
    row = session.execute(select(TaskInstance.try_number, TaskInstance.max_tries).where(
        TaskInstance.dag_id == ref.dag_id, TaskInstance.run_id == ref.run_id, TaskInstance.task_id == ref.task_id,
        TaskInstance.map_index == ref.map_index,
    )).first()
    if conn_id is None or row is None:
        return None
    retries = fields.get("retries")
    first_try = first_try_since_clear(row.try_number or 0, row.max_tries or 0,
                                      int(retries) if isinstance(retries, (int, float)) else 0)
    # Teams own connections only in multi-team mode; outside it, Airflow refuses a team name outright.
    team = DagModel.get_team_name(ref.dag_id, session=session) if conf.getboolean("core", "multi_team") else None
    return _Tracking(conn_id, values["mlflow_experiment"] or ref.dag_id, values["register_model"],
                     RunKey(ref.dag_id, ref.task_id, ref.run_id, ref.map_index, first_try), team)


def _find_run(tracking: _Tracking, connection: Any, timeout: float) -> MlflowLinks:
    try:
        hook = MlflowHook(tracking.conn_id, timeout=timeout, retries=0, connection=connection)
    except ValueError:
        return MlflowLinks(note=f"MLflow: the connection {tracking.conn_id} has no host.")
    if not hook.tracking_uri.startswith(("http://", "https://")):
        return MlflowLinks(note=f"MLflow: the connection {tracking.conn_id} is not an http(s) URL.")
    try:
        experiment = hook.request("GET", "experiments/get-by-name", params={"experiment_name": tracking.experiment})
        experiment_id = str(experiment["experiment"]["experiment_id"])
        found = hook.request("POST", "runs/search", body={
            "experiment_ids": [experiment_id], "filter": tracking.key.search_filter(), "max_results": 1,
            "order_by": ["attributes.start_time ASC"]}).get("runs") or []
    except MlflowApiError as error:
        if error.error_code == "RESOURCE_DOES_NOT_EXIST":
            found = []
        elif error.status is None:
            return MlflowLinks(note=_unreachable(timeout))
        else:
            return MlflowLinks(note=f"MLflow: the tracking server answered {error.status} to finding the run.")
    except (KeyError, TypeError, ValueError):
        return MlflowLinks(note="MLflow: the tracking server's answer was not MLflow's.")
    if not found:
        return MlflowLinks(note="MLflow: the tracking server holds no run of this task instance (yet).")
    info = found[0].get("info") or {}
    tags = {tag.get("key"): tag.get("value") for tag in (found[0].get("data") or {}).get("tags") or []
            if isinstance(tag, Mapping)}
    links = MlflowLinks(run_url=run_url(hook.tracking_uri, experiment_id, str(info.get("run_id", ""))))
    version = model_version_of(tags.get(MODEL_VERSION_TAG), tracking.register_model)
    if version is None or tracking.register_model is None:
        return links
    return MlflowLinks(run_url=links.run_url, model_version=f"{tracking.register_model} version {version}",
                       model_version_url=model_version_url(hook.tracking_uri, tracking.register_model, version))


__all__ = ["MlflowLinks", "mlflow_links"]

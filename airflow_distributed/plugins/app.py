"""The plugin's FastAPI app: a job's record as JSON and as an HTML view, behind Airflow's own authentication.

Mounted by Airflow under ``/distributed``:

- ``GET /distributed/api/jobs/{dag_id}/{run_id}/{task_id}?map_index=-1``: the record (the ``job`` XCom) as JSON
- ``GET /distributed/jobs/{dag_id}/{run_id}/{task_id}?map_index=-1``: the HTML view of the same record

Both use Airflow's security dependencies, so the caller is whoever Airflow authenticates (a JWT in the
``Authorization: Bearer`` header, or the UI's ``_token`` cookie) and the auth manager decides: the caller
must be allowed to read the DAG's XComs. The replicas' log lines are in no XCom: they are read from the task's log
(``task_log``), or from the pods of a running cluster job, only for a caller who may also read the DAG's task logs.
The HTML view sends a caller who is not logged in to Airflow's login page.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from airflow.api_fastapi.app import get_auth_manager
from airflow.api_fastapi.auth.managers.models.base_user import BaseUser
from airflow.api_fastapi.auth.managers.models.resource_details import DagAccessEntity, DagDetails
from airflow.api_fastapi.common.db.common import SessionDep
from airflow.api_fastapi.core_api.security import GetUserDep, requires_access_dag
from airflow.models.dag import DagModel
from fastapi import Depends, FastAPI, HTTPException, Query, Request, status
from fastapi.exception_handlers import http_exception_handler
from fastapi.responses import HTMLResponse, RedirectResponse, Response

from airflow_distributed.plugins import page
from airflow_distributed.plugins.job_source import JobStateSource
from airflow_distributed.plugins.job_state import DEFAULT_SOURCES, read_job, task_instance_state
from airflow_distributed.plugins.mlflow_links import mlflow_links
from airflow_distributed.plugins.task_log import task_log_lines
from airflow_distributed.plugins.urls import URL_PREFIX, job_api_path
from airflow_distributed.task_instance import TaskInstanceRef

#: The page is inline CSS and SVG only: no script may run, no resource loads, only Airflow's UI may frame it.
HTML_HEADERS = {
    "Content-Security-Policy": "default-src 'none'; style-src 'unsafe-inline'; img-src data:; "
    "frame-ancestors 'self'; base-uri 'none'; form-action 'none'",
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "same-origin",
    "Cache-Control": "no-store",
}
# The UI leaves "{MAP_INDEX}" in the frame's URL for a task that is not mapped.
_UNMAPPED = {"", "-1", "{MAP_INDEX}"}

#: The task instance table's map_index is a 32-bit integer; a larger one names no task instance.
MAX_MAP_INDEX = 2**31 - 1

MapIndexQuery = Query(None, description="The task instance's map index; -1 or absent when not mapped.")
read_xcoms = Depends(requires_access_dag(method="GET", access_entity=DagAccessEntity.XCOM))


def parse_map_index(value: str | None) -> int:
    if value is None or value.strip() in _UNMAPPED:
        return -1
    try:
        index = int(value)
    except ValueError:
        raise HTTPException(422, f"map_index must be an integer, not {value!r}") from None
    if not -1 <= index <= MAX_MAP_INDEX:
        raise HTTPException(422, f"map_index must be between -1 and {MAX_MAP_INDEX}")
    return index


def may_read_logs(user: BaseUser, dag_id: str, session: Any) -> bool:
    """Whether the auth manager lets ``user`` read the DAG's task logs (the record carries their last lines)."""
    details = DagDetails(id=dag_id, team_name=DagModel.get_team_name(dag_id, session=session))
    return get_auth_manager().is_authorized_dag(
        method="GET", access_entity=DagAccessEntity.TASK_LOGS, details=details, user=user
    )


def create_app(sources: Sequence[JobStateSource] = DEFAULT_SOURCES) -> FastAPI:
    """The app Airflow mounts at ``URL_PREFIX``; ``sources`` are asked in order for a job's state."""
    app = FastAPI(
        title="Distributed training job view",
        description="Job records of DistributedTrainingOperator task instances.",
        docs_url=None,
        redoc_url=None,
    )

    def lookup(ref: TaskInstanceRef, user: BaseUser, session: Any) -> tuple[dict[str, Any], str] | None:
        found = read_job(ref, session, sources)
        if found is None:
            return None
        record, source = found
        # Lines only for a viewer who may read the task's logs: those a source read from a running cluster job's
        # pods, else the task log's (an XCom has none: ``job_state.decode_record``).
        pod_lines = record.pop("logs", None)
        if not may_read_logs(user, ref.dag_id, session):
            logs = None
        elif pod_lines is not None:
            logs = pod_lines
        else:
            logs = task_log_lines(ref, record, session)
        return {**record, "logs": logs}, source

    @app.get("/api/jobs/{dag_id}/{run_id}/{task_id}", dependencies=[read_xcoms])
    def job_record(
        dag_id: str, run_id: str, task_id: str, session: SessionDep, user: GetUserDep,
        map_index: str | None = MapIndexQuery,
    ) -> dict[str, Any]:
        """The job record of one task instance; ``source`` says where it was read from."""
        ref = TaskInstanceRef(dag_id=dag_id, run_id=run_id, task_id=task_id, map_index=parse_map_index(map_index))
        found = lookup(ref, user, session)
        if found is None:
            state = task_instance_state(ref, session)
            detail = "no such task instance" if state is None else f"no job record; the task instance is {state}"
            raise HTTPException(status.HTTP_404_NOT_FOUND, detail)
        record, source = found
        return {**record, "source": source}

    @app.get("/jobs/{dag_id}/{run_id}/{task_id}", response_class=HTMLResponse, dependencies=[read_xcoms])
    def job_view(
        dag_id: str, run_id: str, task_id: str, session: SessionDep, user: GetUserDep,
        map_index: str | None = MapIndexQuery,
    ) -> HTMLResponse:
        """The HTML view of one task instance's job: replicas, metrics, model, history charts, log tails."""
        ref = TaskInstanceRef(dag_id=dag_id, run_id=run_id, task_id=task_id, map_index=parse_map_index(map_index))
        found = lookup(ref, user, session)
        if found is None:
            html = page.missing_page(ref, task_instance_state(ref, session))
            return HTMLResponse(html, status_code=status.HTTP_404_NOT_FOUND, headers=HTML_HEADERS)
        record, source = found
        # Relative (jobs/<dag>/<run>/<task> -> api/jobs/...), so it holds under any [api] base_url path.
        json_href = "../../.." + job_api_path(dag_id, run_id, task_id, ref.map_index).removeprefix(URL_PREFIX)
        show_logs = record.get("logs") is not None
        html = page.job_page(record, ref, source=source, show_logs=show_logs, json_href=json_href,
                             mlflow=mlflow_links(ref, session))
        return HTMLResponse(html, headers=HTML_HEADERS)

    @app.exception_handler(HTTPException)
    async def errors(request: Request, exc: HTTPException) -> Response:
        # JSON for the API; for the page, a login redirect or an error page that reads well inside the frame.
        if request.scope.get("endpoint") is not job_view:
            return await http_exception_handler(request, exc)
        if exc.status_code == status.HTTP_401_UNAUTHORIZED:
            login = get_auth_manager().get_url_login(next_url=str(request.url))
            return RedirectResponse(login, status.HTTP_303_SEE_OTHER, headers={"Cache-Control": "no-store"})
        message = {
            status.HTTP_403_FORBIDDEN: "You are not allowed to read this DAG's task data.",
        }.get(exc.status_code, str(exc.detail))
        return HTMLResponse(page.error_page(exc.status_code, message), exc.status_code, headers=HTML_HEADERS)

    return app

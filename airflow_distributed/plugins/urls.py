"""Where the job view lives: the plugin's URL prefix, its tab in the Airflow UI, and the paths to both (pure).

Shared by the operator links (which run on workers) and the UI plugin (which runs in the API server), so this
module imports nothing from Airflow.
"""

from __future__ import annotations

from urllib.parse import quote

#: Mount point of the plugin's FastAPI app inside the Airflow API server.
URL_PREFIX = "/distributed"
#: ``url_route`` of the external view: the UI shows it as ``.../tasks/<task_id>/plugin/distributed-job``.
VIEW_ROUTE = "distributed-job"
#: The external view's ``href``; the Airflow UI fills ``{DAG_ID}``, ``{RUN_ID}``, ``{TASK_ID}`` and, for a mapped
#: task only, ``{MAP_INDEX}`` (an unmapped task leaves the placeholder as it is, read as -1). Relative, so the
#: frame resolves it against the UI's ``<base href>`` and it holds when ``[api] base_url`` has a path.
EXTERNAL_VIEW_HREF = URL_PREFIX.lstrip("/") + "/jobs/{DAG_ID}/{RUN_ID}/{TASK_ID}?map_index={MAP_INDEX}"


def _segment(value: str) -> str:
    # Run ids carry ':' and '+' (manual__2026-01-01T00:00:00+00:00); quote everything but unreserved characters.
    return quote(str(value), safe="")


def job_api_path(dag_id: str, run_id: str, task_id: str, map_index: int | None = -1) -> str:
    """Path of the plugin's JSON job record for one task instance."""
    path = f"{URL_PREFIX}/api/jobs/{_segment(dag_id)}/{_segment(run_id)}/{_segment(task_id)}"
    return path if map_index is None or map_index < 0 else f"{path}?map_index={int(map_index)}"


def ui_tab_path(dag_id: str, run_id: str, task_id: str, map_index: int | None = -1) -> str:
    """Path of the job view's tab on the task instance page of the Airflow UI (the view inside Airflow's frame)."""
    path = f"/dags/{_segment(dag_id)}/runs/{_segment(run_id)}/tasks/{_segment(task_id)}"
    if map_index is not None and map_index >= 0:
        path += f"/mapped/{int(map_index)}"
    return f"{path}/plugin/{VIEW_ROUTE}"

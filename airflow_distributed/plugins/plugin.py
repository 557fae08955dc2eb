"""``DistributedTrainingPlugin``: mounts the job view in the Airflow API server and adds its task instance tab.

Registered through the provider's ``airflow.plugins`` entry point. The UI shows the external view as a tab of
every task instance page and loads it in a same-origin frame, which sends Airflow's ``_token`` session cookie
along, so the page authenticates like the UI itself.
"""

from __future__ import annotations

from typing import Any

from airflow.plugins_manager import AirflowPlugin

from airflow_distributed.plugins.urls import EXTERNAL_VIEW_HREF, URL_PREFIX, VIEW_ROUTE


class JobViewApp:
    """The ASGI app Airflow mounts; the FastAPI app behind it is built on its first request.

    Schedulers, DAG processors and workers load plugins too (and ``import airflow`` itself does, with
    ``[core] lazy_load_plugins`` off), but only the API server serves them. This is the plugin's one lazy
    boundary: ``app`` and what it imports (``job_state``, ``live_kubernetes``: the API server's security
    modules, Airflow's ORM models, the Kubernetes client and the hooks) load on the first request, so loading
    the plugin imports only this module and ``urls``.
    """

    def __init__(self) -> None:
        self._app: Any = None

    async def __call__(self, scope: dict, receive: Any, send: Any) -> None:
        if self._app is None:
            # Two first requests at once may both build it; the apps are equal and one is kept. Imported here,
            # not at the top: see the class docstring.
            from airflow_distributed.plugins.app import create_app

            self._app = create_app()
        await self._app(scope, receive, send)


class DistributedTrainingPlugin(AirflowPlugin):
    """The job view of ``DistributedTrainingOperator`` tasks, as a FastAPI app and a task instance tab."""

    name = "airflow_distributed"
    fastapi_apps = [{"app": JobViewApp(), "url_prefix": URL_PREFIX, "name": "Distributed training job view"}]
    external_views = [
        {
            "name": "Distributed job",
            "href": EXTERNAL_VIEW_HREF,
            "destination": "task_instance",
            "url_route": VIEW_ROUTE,
        }
    ]

"""Steps a task's job takes the same way on both Kubernetes-side backends (``kubernetes`` and ``kubeflow``).

Kept apart from the backends so that neither imports the other for them; like the backends, it imports the
Kubernetes clients only when a job runs.
"""

from __future__ import annotations

import json
import time
from datetime import timedelta
from typing import TYPE_CHECKING, Any

from airflow_distributed.backends.base import BackendSettings, DistributedJobError
from airflow_distributed.outputs import document_warning

if TYPE_CHECKING:
    from airflow.sdk import Context

    from airflow_distributed.hooks.watch_loop import WatchTimings
    from airflow_distributed.logs import TaskLog


def job_error(message: str) -> Exception:
    return DistributedJobError(message)


def require_image(settings: BackendSettings, backend: str) -> None:
    if not settings.image:
        raise job_error(f"backend={backend!r} runs every replica from an image: set image=")


def deferral_deadline(settings: BackendSettings, context: Context) -> tuple[float | None, timedelta | None]:
    """When the task's ``execution_timeout`` ends (epoch seconds, for the trigger), and the deferral's timeout."""
    execution_timeout = settings.execution_timeout
    start_date = getattr(context["ti"], "start_date", None)
    if execution_timeout is None or start_date is None:
        return None, None
    deadline = start_date.timestamp() + execution_timeout.total_seconds()
    # Past the trigger's own deadline event, so that execute_complete (and its clean-up) always runs.
    return deadline, timedelta(seconds=max(0.0, deadline - time.time()) + 60)


def watch_timings(settings: BackendSettings) -> WatchTimings:
    """The operator's ``watch_timings`` (checked at parse time) with the defaults filled in."""
    from airflow_distributed.hooks.watch_loop import WatchTimings

    return WatchTimings.of(settings.watch_timings)


def push_success(context: Context, log: TaskLog, result: dict[str, Any], document: dict[str, Any], namespace: str,
                 name: str, elapsed: float) -> dict[str, Any]:
    """The log lines of a job that succeeded; returns ``result``, whose keys Airflow pushes as XComs (outputs.py)."""
    if document["metrics"] == {} and document["model_path"] is None and document_warning(document) is None:
        log.warning("the master wrote no output document: no metrics or model path")
    log.info("job %s/%s succeeded in %.1fs; metrics: %s; model path: %s", namespace, name, elapsed,
             json.dumps(result["metrics"]), result["model_path"])
    return result


__all__ = ["deferral_deadline", "job_error", "push_success", "require_image", "watch_timings"]

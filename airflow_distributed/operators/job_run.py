"""Steps a task's job takes the same way on both Kubernetes-side backends (``kubernetes`` and ``kubeflow``).

Kept apart from the backends so that neither imports the other for them; like the backends, it imports the
Kubernetes clients only when a job runs.
"""

from __future__ import annotations

import json
import time
from datetime import timedelta
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from airflow.sdk import Context

    from airflow_distributed.hooks.watch_loop import WatchTimings
    from airflow_distributed.logs import TaskLog
    from airflow_distributed.operators.training import DistributedTrainingOperator
    from airflow_distributed.spec import TrainingSpec


def job_error(message: str) -> Exception:
    from airflow_distributed.operators.training import DistributedJobError

    return DistributedJobError(message)


def spec_at_parse_time(operator: DistributedTrainingOperator) -> TrainingSpec | None:
    """The operator's spec for a backend's parse-time checks: ``None`` while it is a template (the backend checks it
    once rendered, before anything starts) or invalid (the operator reports the spec's own problems)."""
    from airflow_distributed.operators.training import _has_template
    from airflow_distributed.spec import SpecValidationError, load_spec

    framework, environment = getattr(operator, "framework", None), getattr(operator, "environment", None)
    if _has_template(framework) or _has_template(environment):
        return None
    try:
        return load_spec(framework, environment)
    except SpecValidationError:
        return None


def require_image(operator: DistributedTrainingOperator, backend: str) -> None:
    if not operator.image:
        raise job_error(f"backend={backend!r} runs every replica from an image: set image=")


def deferral_deadline(operator: DistributedTrainingOperator, context: Context) -> tuple[float | None, timedelta | None]:
    """When the task's ``execution_timeout`` ends (epoch seconds, for the trigger), and the deferral's timeout."""
    execution_timeout = operator.execution_timeout
    start_date = getattr(context["ti"], "start_date", None)
    if execution_timeout is None or start_date is None:
        return None, None
    deadline = start_date.timestamp() + execution_timeout.total_seconds()
    # Past the trigger's own deadline event, so that execute_complete (and its clean-up) always runs.
    return deadline, timedelta(seconds=max(0.0, deadline - time.time()) + 60)


def watch_timings(operator: DistributedTrainingOperator) -> WatchTimings:
    """The operator's ``watch_timings`` (checked at parse time) with the defaults filled in."""
    from airflow_distributed.hooks.watch_loop import WatchTimings

    return WatchTimings.of(getattr(operator, "watch_timings", None))


def push_success(context: Context, log: TaskLog, result: dict[str, Any], document: dict[str, Any], namespace: str,
                 name: str, elapsed: float) -> dict[str, Any]:
    """The log lines of a job that succeeded; returns ``result``, whose keys Airflow pushes as XComs (outputs.py)."""
    if document["metrics"] == {} and document["model_path"] is None:
        log.warning("the master wrote no output document: no metrics or model path")
    log.info("job %s/%s succeeded in %.1fs; metrics: %s; model path: %s", namespace, name, elapsed,
             json.dumps(result["metrics"]), result["model_path"])
    return result


__all__ = ["deferral_deadline", "job_error", "push_success", "require_image", "spec_at_parse_time"]

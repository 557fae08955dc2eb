"""Steps a task's job takes the same way on both Kubernetes-side backends (``kubernetes`` and ``kubeflow``).

Kept apart from the backends so that neither imports the other for them; like the backends, it imports the
Kubernetes clients only when a job runs.
"""

from __future__ import annotations

import json
import time
from datetime import timedelta
from typing import TYPE_CHECKING, Any

from airflow_distributed.backends.base import BackendSettings, DistributedJobError, Problem, has_template
from airflow_distributed.exceptions import error_class_named
from airflow_distributed.naming import DNS_LABEL_RULE, is_dns_label
from airflow_distributed.outputs import document_warning
from airflow_distributed.spec import SpecValidationError

if TYPE_CHECKING:
    from airflow.sdk import Context

    from airflow_distributed.hooks.kube_api import KubeApiHook
    from airflow_distributed.hooks.watch_loop import WatchTimings
    from airflow_distributed.logs import TaskLog


#: The failure's note when the clean-up after a failed wait was itself refused or failed (its error is logged).
NOT_CLEANED_UP = "it could not be cleaned up (see the error above): delete it by hand"


def job_error(message: str) -> Exception:
    return DistributedJobError(message)


def event_error_class(event: dict[str, Any]) -> type[DistributedJobError] | None:
    """The class of the error that ended a trigger's wait (``ClusterRefusedError``...), which its event names."""
    return error_class_named(event.get("error_class"))


def require_image(settings: BackendSettings, backend: str) -> None:
    if not settings.image:
        raise job_error(f"backend={backend!r} runs every replica from an image: set image=")


def namespace_problems(namespace: Any) -> list[Problem]:
    """``namespace``, when given and not a template (that is checked once rendered, by ``job_namespace``), must be a
    DNS-1123 label. The value is not repeated in the message: it may hold anything."""
    if not namespace or has_template(namespace) or is_dns_label(namespace):  # none given: the connection's
        return []
    return [("namespace", f"is not a valid namespace: it must be {DNS_LABEL_RULE}")]


def job_namespace(settings: BackendSettings, hook: KubeApiHook, task_id: str) -> str:
    """The namespace of the job: ``namespace`` as rendered, else the connection's; refused unless a DNS-1123 label,
    before anything is created (it is also part of every replica's address)."""
    namespace = settings.namespace or hook.default_namespace()
    if not is_dns_label(namespace):
        given = "namespace" if settings.namespace else f"namespace (of connection {settings.kubernetes_conn_id!r})"
        raise SpecValidationError([(given, f"is not a valid namespace: it must be {DNS_LABEL_RULE}")],
                                  source=f"task {task_id}")
    return namespace


def ignored_in_cluster(settings: BackendSettings, backend: str) -> list[Problem]:
    """Settings a Kubernetes-side ``backend`` accepts and does not use, harmless to ignore: said once per try
    (``log_ignored``)."""
    ignored: list[Problem] = []
    if settings.python is not None:
        ignored.append(("python", "it names the interpreter of the local backend's replicas; in a pod a leading "
                        "'python' in command is the image's own"))
    if settings.log_replicas is not None and backend != "kubernetes":
        ignored.append(("log_replicas", "only backend='kubernetes' follows other replicas' logs; a failed "
                        "replica's last lines are in the error"))
    return ignored


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


__all__ = ["NOT_CLEANED_UP", "deferral_deadline", "event_error_class", "ignored_in_cluster", "job_error",
           "job_namespace", "namespace_problems", "push_success", "require_image", "watch_timings"]

"""What the operator's arguments become for the manifests and the hooks when a job of a Kubernetes-side backend
(``kubernetes``, ``kubeflow``, ``trainjob``) runs: the manifest options and the watch timings.

Run-time only: the backends' run modules import it (it loads the Kubernetes manifests, and so the client); what
their parse-time checks share is ``job_run``.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

from airflow_distributed.jobstate.watch_timings import WatchTimings
from airflow_distributed.manifests.kubernetes import JobManifestOptions
from airflow_distributed.task_instance import TaskInstanceRef

if TYPE_CHECKING:
    from airflow.sdk import Context

    from airflow_distributed.backends.base import ForCluster

#: Past the task's execution_timeout, how long a pod may still run if nothing deletes it (a worker that died).
DEADLINE_MARGIN_SECONDS = 120


def manifest_options(settings: ForCluster, context: Context, namespace: str,
                     xcom_sidecar_image: str | None = None) -> JobManifestOptions:
    """What the manifests of every Kubernetes-side backend take from the operator's arguments and the task, and the
    image of the XCom sidecar (the connection's ``xcom_sidecar_container_image``, read by the caller's hook)."""
    deadline = None
    if settings.execution_timeout is not None:
        # A backstop for a worker that dies without a retry: the pods stop on their own after the task's time.
        deadline = math.ceil(settings.execution_timeout.total_seconds()) + DEADLINE_MARGIN_SECONDS
    return JobManifestOptions(
        namespace=namespace,
        image=settings.options.image or "",  # require_image has refused a job without one
        gpu_resource_key=settings.options.gpu_resource_key,
        shm_size=settings.options.shm_size,
        task_instance=TaskInstanceRef.of(context["ti"]),
        model_volume=settings.options.model_volume,
        scheduler_name=settings.options.scheduler_name,
        gang_scheduling=settings.options.gang_scheduling,
        queue_name=settings.options.queue_name,
        active_deadline_seconds=deadline,
        xcom_sidecar_image=xcom_sidecar_image,
    )


def watch_timings(settings: ForCluster) -> WatchTimings:
    """The operator's ``watch_timings`` (checked at parse time) with the defaults filled in."""
    return WatchTimings.of(settings.options.watch_timings)


__all__ = ["DEADLINE_MARGIN_SECONDS", "manifest_options", "watch_timings"]

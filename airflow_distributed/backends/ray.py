"""``backend="ray"``: the job runs in an existing Ray cluster, as one Ray Job whose driver starts the replicas.

The driver (``replica.ray_driver``) reserves a placement group of one bundle per replica, learns each replica's
node address and a free port from an actor in its bundle, and starts each replica's command there with the
contract's variables; the task submits it through the Jobs API (``hooks.ray``) and waits for it, here or in the
triggerer. The Ray Job's submission id is the job's deterministic name: a retry finds its job still running and
waits for it again, or starts a new one.

Importing this module is cheap (the operator checks its arguments with it when a DAG is parsed, without Ray
installed): ``RayBackend`` imports its run-time module, ``ray_run`` (``requests``, the Jobs API's hook, the
trigger), when a job runs or resumes; Ray itself is imported only where a job is submitted.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, ClassVar

from airflow_distributed.backends.base import (
    ForRay,
    Problem,
    RaySettings,
    TaskCalls,
    launcher_problems,
    process_problems,
    trainjob_only,
)
from airflow_distributed.backends.local import pod_settings
from airflow_distributed.frameworks import get_framework
from airflow_distributed.manifests.ray import ray_option_problems
from airflow_distributed.spec.commands import own_launcher_problems

if TYPE_CHECKING:
    from airflow.sdk import Context

    from airflow_distributed.backends.ray_run import RayJobRun
    from airflow_distributed.spec import TrainingSpec

#: Pod settings of the spec a Ray cluster cannot honour: ignoring them would run the replicas elsewhere, or
#: without what they give, than the spec says.
REFUSED_POD_SETTINGS = {
    "node_selector": "Ray places replicas by resources, not by node labels",
    "affinity": "Ray places replicas by resources and the placement strategy, not by affinity rules",
    "tolerations": "a Ray cluster has no taints to tolerate",
    "secret_refs": "a Ray cluster has no Kubernetes Secrets; give the variables with env=",
    "config_map_refs": "a Ray cluster has no ConfigMaps; give the variables with env=",
    "service_account": "the replicas run as the Ray cluster's processes, with no Kubernetes identity",
    "image_pull_secrets": "the replicas run in the cluster's Python environment and pull no image",
    "security_context": "the replicas run as the Ray cluster's processes, with its user",
}
#: Operator arguments the Ray backend refuses: what they ask for does not happen on a Ray cluster.
REFUSED_ARGUMENTS = {
    "image": "the replicas run in the Ray cluster's Python environment, not in an image",
    "model_volume": "is mounted in pods only: on a Ray cluster give model_dir= a path on storage every node shares",
    "gang_scheduling": "the Ray backend always reserves every replica together in one placement group",
    "scheduler_name": "Ray's own scheduler places the replicas",
    "queue_name": "no Kueue admits a Ray job",
    "queue_timeout": "is judged by the Kubernetes and Kubeflow backends only: the Ray job waits for its placement "
                     "group within startup_timeout",
}


class RayBackend:
    """``backend="ray"``: one Ray Job on the cluster of connection ``ray_conn_id``."""

    name: ClassVar[str] = "ray"
    options_class: ClassVar[type] = RaySettings

    def __init__(self) -> None:
        #: this try's job, for ``kill``
        self.current: RayJobRun | None = None
        #: ``kill`` came; it may come before ``current`` knows its job
        self._killed = False

    def check(self, settings: ForRay, spec: TrainingSpec | None) -> list[Problem]:
        return check_ray_arguments(settings, spec)

    def kill(self) -> None:
        self._killed = True
        if self.current is not None:
            self.current.stop()

    def run(self, task: TaskCalls, settings: ForRay, context: Context, spec: TrainingSpec, name: str,
            command: Sequence[str]) -> dict[str, Any]:
        return self._job_run(task, settings).run(context, spec, name, command)

    def resume(self, task: TaskCalls, settings: ForRay, context: Context,
               event: dict[str, Any]) -> dict[str, Any]:
        return self._job_run(task, settings).resume(context, event)

    def _job_run(self, task: TaskCalls, settings: ForRay) -> RayJobRun:
        """This try's run, kept for ``kill``."""
        # The one lazy boundary of the backend: requests, the Jobs API's hook and the trigger load here.
        from airflow_distributed.backends.ray_run import RayJobRun

        self.current = RayJobRun(task, settings, killed=lambda: self._killed)
        return self.current


def check_ray_arguments(settings: ForRay, spec: TrainingSpec | None) -> list[Problem]:
    """Problems with the arguments for ``backend="ray"``: settings a Ray cluster cannot honour, named."""
    problems: list[Problem] = [(name, why) for name, why in REFUSED_ARGUMENTS.items()
                               if settings.argument(name) is not None]
    problems += ray_option_problems(settings.options.ray_options)
    if spec is not None and get_framework(spec.framework).launches_over_ssh:
        problems.append(("framework", f"{spec.framework} is not run by backend='ray': its launcher reaches the workers "
                         f"over SSH; use {spec.framework} on backend='local' or 'kubernetes', or pytorch/tensorflow "
                         "on ray"))
    pytorch = spec.environment.pytorch if spec is not None else None
    if pytorch is not None and pytorch.elastic is not None:
        problems.append(("environment.pytorch.elastic", "backend='ray' restarts no replica: remove it, or use "
                         "backend='local' or 'kubernetes'"))
    for path, settings_of in pod_settings(spec):
        for name, why in REFUSED_POD_SETTINGS.items():
            if getattr(settings_of, name):
                problems.append((f"{path}.{name}", f"is not honoured by backend='ray': {why}"))
    return (problems + trainjob_only(settings, spec, RayBackend.name) + process_problems(spec)
            + launcher_problems(spec, RayBackend.name, runs=(), why="one actor per replica runs its command")
            + own_launcher_problems(spec, settings.command, settings.args))


__all__ = ["RayBackend", "check_ray_arguments"]

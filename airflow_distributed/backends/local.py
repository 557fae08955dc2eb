"""``backend="local"``: every replica a subprocess of the task on the worker, addresses on 127.0.0.1.

The replicas are children of the task, so the task always waits for them (no deferral) and a killed task stops
them all.

Importing this module is cheap (the operator checks its arguments with it when a DAG is parsed): ``LocalBackend``
imports its run-time module, ``local_run`` (the processes' hook, ``psutil``), when a job runs.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, ClassVar

from airflow_distributed.backends.base import (
    DistributedJobError,
    ForProcesses,
    Problem,
    ProcessSettings,
    TaskCalls,
    launcher_problems,
    log_ignored,
    process_problems,
    trainjob_only,
)
from airflow_distributed.spec.commands import own_launcher_problems
from airflow_distributed.spec.models import SECTION_OF

if TYPE_CHECKING:
    from airflow.sdk import Context

    from airflow_distributed.backends.local_run import LocalJobRun
    from airflow_distributed.spec import TrainingSpec
    from airflow_distributed.spec.models import PodSettings

#: Pod settings of the spec the local backend refuses: the replicas would start without the variables they give.
REFUSED_POD_SETTINGS = ("secret_refs", "config_map_refs")
#: Pod settings of the spec that mean nothing to processes on one machine: said once per try, then ignored.
IGNORED_POD_SETTINGS = ("node_selector", "affinity", "tolerations", "labels", "annotations", "service_account",
                        "image_pull_secrets", "security_context")
#: Operator arguments of the Kubernetes-side backends, harmless to ignore here: said once per try when given.
IGNORED_ARGUMENTS = {
    "image": "the replicas run on the worker, with python= (default: Airflow's interpreter)",
    "namespace": "the replicas are processes on the worker, in no namespace",
    "clean_pod_policy": "the replicas are processes, all stopped when the job ends",
    "scheduler_name": "the replicas are processes, started by the task",
    "gang_scheduling": "the replicas are processes, all started together by the task",
    "queue_name": "no Kueue admits the replicas: they start at once on the worker",
    "queue_timeout": "the replicas wait in no queue: they start at once on the worker",
    "watch_timings": "there is no Kubernetes API to watch",
}


class LocalBackend:
    """``backend="local"``: subprocesses on the worker, no cluster."""

    name: ClassVar[str] = "local"
    options_class: ClassVar[type] = ProcessSettings

    def __init__(self) -> None:
        #: this try's replicas, for ``kill``
        self.current: LocalJobRun | None = None
        #: ``kill`` came; it may come while the replicas are being started, before ``current`` holds them
        self._killed = False

    def check(self, settings: ForProcesses, spec: TrainingSpec | None) -> list[tuple[str, str]]:
        return check_local_arguments(settings, spec)

    def resume(self, task: TaskCalls, settings: ForProcesses, context: Context,
               event: dict[str, Any]) -> dict[str, Any]:
        raise DistributedJobError("backend='local' never defers, so it has nothing to resume")

    def kill(self) -> None:
        # Runs in the task's SIGTERM handler, on the main thread between two bytecodes of ``run``: the flag
        # covers a kill that lands after the replicas were started but before the run holds them.
        self._killed = True
        if self.current is not None:
            self.current.stop()

    def run(self, task: TaskCalls, settings: ForProcesses, context: Context, spec: TrainingSpec, name: str,
            command: Sequence[str]) -> dict[str, Any]:
        log_ignored(task.log, self.name, ignored_by_local(settings, spec))
        # The one lazy boundary of the backend: the processes' hook (psutil) loads here.
        from airflow_distributed.backends.local_run import LocalJobRun

        self.current = LocalJobRun(task, settings, killed=lambda: self._killed)
        return self.current.run(context, spec, name, command)


def check_local_arguments(settings: ForProcesses, spec: TrainingSpec | None) -> list[Problem]:
    """Problems with the arguments for ``backend="local"``: settings it cannot honour and whose absence would change
    the job (it always waits; no Secret or ConfigMap gives variables; no volume holds the model; no runtime)."""
    problems: list[Problem] = []
    if not settings.wait_for_completion:
        problems.append(("wait_for_completion", "the local backend's replicas are children of the task, "
                         "so it always waits; use backend='kubernetes' to start a job and return"))
    if settings.argument("model_volume") is not None:
        problems.append(("model_volume", "is mounted in pods only: the local backend's replicas save the model in "
                         "model_dir on the worker; give model_dir= a path or a URL, or use backend='kubernetes'"))
    for path, settings_of in pod_settings(spec):
        for name in REFUSED_POD_SETTINGS:
            if getattr(settings_of, name):
                problems.append((f"{path}.{name}", "the local backend has no Secrets or ConfigMaps: the replicas "
                                 "would start without their variables; give them with env= or use "
                                 "backend='kubernetes'"))
    return (problems + trainjob_only(settings, spec, LocalBackend.name) + process_problems(spec)
            + launcher_problems(spec, LocalBackend.name)
            + own_launcher_problems(spec, settings.command, settings.args))


def ignored_by_local(settings: ForProcesses, spec: TrainingSpec) -> list[Problem]:
    """``(setting, why)`` of each setting the local backend accepts and does not use, for the task log, once per
    try; the spec's pod settings by field, with every path that gives it."""
    ignored: list[Problem] = [(name, why) for name, why in IGNORED_ARGUMENTS.items()
                              if settings.argument(name) is not None]
    if settings.deferrable:
        ignored.append(("deferrable=True", "the replicas are children of the task, which waits for them in its "
                        "worker slot (it may come from [operators] default_deferrable)"))
    if settings.argument("image_pull_grace"):
        ignored.append(("image_pull_grace", "the replicas pull no image"))
    if settings.argument("shm_size") not in (None, "auto"):  # "auto", the default, is no request of the user's
        ignored.append(("shm_size", "the replicas are processes on the worker, sharing its /dev/shm"))
    return ignored + ignored_pod_settings(spec, IGNORED_POD_SETTINGS, "the replicas are processes on the worker")


def ignored_pod_settings(spec: TrainingSpec | None, names: Sequence[str], where: str) -> list[Problem]:
    """One ``(paths, why)`` per pod setting of ``names`` the spec gives, with every path that gives it, for a backend
    whose replicas are not pods (``where`` says what they are)."""
    ignored: list[Problem] = []
    for name in names:
        paths = [f"{path}.{name}" for path, settings_of in pod_settings(spec) if getattr(settings_of, name)]
        if paths:
            ignored.append((", ".join(paths), f"it is a pod's setting, and {where}"))
    return ignored


def pod_settings(spec: TrainingSpec | None) -> list[tuple[str, PodSettings]]:
    """Every place of the spec that holds pod settings, with its path: the master's, then each role's."""
    if spec is None:
        return []
    found: list[tuple[str, PodSettings]] = [("environment", spec.environment)]
    section = getattr(spec.environment, SECTION_OF[spec.framework])
    if section is None:
        return found
    path = f"environment.{SECTION_OF[spec.framework]}"
    for role in ("worker", "ps"):
        default = getattr(section, f"default_{role}", None)
        if default is not None:
            found.append((f"{path}.default_{role}", default))
        found.extend((f"{path}.{role}[{position}]", entry)
                     for position, entry in enumerate(getattr(section, role, None) or ()))
    return found


__all__ = [
    "LocalBackend",
    "check_local_arguments",
    "ignored_by_local",
    "ignored_pod_settings",
    "pod_settings",
]

"""``backend="kubernetes"``: one pod per replica and a headless Service, created and watched by the task.

``KubernetesBackend`` checks the operator's Kubernetes arguments when the DAG is parsed and drives one
``KubernetesJobRun`` (``kubernetes_run``) per try: ``run`` (``execute``) creates or reattaches the job and waits for
it here or in the triggerer, ``resume`` (``execute_complete``) finishes it from the trigger's event, ``kill``
(``on_kill``) deletes it. The Kubernetes I/O is the hook's (``PodJobHook``) and the trigger's
(``DistributedJobTrigger``); the job's end and its clean-up policy are described in ``kubernetes_finish``.

Reattach: on Airflow 3.3+ the job's identity is also kept in the task's ``task_state_store`` (``resumable``); on
older versions every try submits, and the submission itself finds the job by name and labels.

Importing this module is cheap (the operator checks its arguments with it when a DAG is parsed): ``run_class``
imports the run (``kubernetes_run``, and with it the hook, the trigger and the Kubernetes clients) when a job runs.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, ClassVar

from airflow_distributed.backends.base import (
    ClusterSettings,
    launcher_problems,
    log_ignored,
    process_problems,
    trainjob_only,
)
from airflow_distributed.backends.job_run import check_kubernetes_arguments, ignored_in_cluster
from airflow_distributed.backends.resumable import ResumableKubernetesJob
from airflow_distributed.spec.commands import own_launcher_problems

if TYPE_CHECKING:
    from airflow.sdk import Context

    from airflow_distributed.backends.base import ForCluster, Problem, TaskCalls
    from airflow_distributed.backends.kubernetes_run import KubernetesJobRun
    from airflow_distributed.spec import TrainingSpec


class KubernetesBackend:
    """``backend="kubernetes"``: one pod per replica and a headless Service, watched by the task."""

    name: ClassVar[str] = "kubernetes"
    options_class: ClassVar[type] = ClusterSettings

    def __init__(self) -> None:
        #: the job being waited for, for ``kill``
        self.current: KubernetesJobRun | None = None

    @staticmethod
    def run_class() -> type[KubernetesJobRun]:
        """The run of a job: the backend's one lazy import, so that a DAG parse loads no Kubernetes client."""
        from airflow_distributed.backends.kubernetes_run import KubernetesJobRun

        return KubernetesJobRun

    def check(self, settings: ForCluster, spec: TrainingSpec | None) -> list[Problem]:
        return (check_kubernetes_arguments(settings, spec) + trainjob_only(settings, spec, self.name)
                + process_problems(spec) + launcher_problems(spec, self.name)
                + own_launcher_problems(spec, settings.command, settings.args))

    def run(self, task: TaskCalls, settings: ForCluster, context: Context, spec: TrainingSpec, job_name: str,
            command: Sequence[str]) -> dict[str, Any]:
        """Create or reattach the job, then wait (here or deferred).

        :returns: the ``return_value`` XCom, each key of it an XCom too; ``job`` is pushed here (also on failure).
        :raises DistributedJobError: the job failed, did not start, or was stopped.
        :raises KubernetesJobError: the API refused something for good.
        """
        log_ignored(task.log, self.name, ignored_in_cluster(settings, self.name))
        run = self.current = self.run_class().start(task, settings, context, spec, job_name, command)
        if not settings.wait_for_completion:
            handle = run.submit()
            run.log.info("job %s/%s submitted; not waiting for it (wait_for_completion=False)", handle.namespace,
                         handle.name)
            return {"job_name": handle.name, "namespace": handle.namespace}
        return ResumableKubernetesJob(run).execute_resumable(context)

    def resume(self, task: TaskCalls, settings: ForCluster, context: Context,
               event: dict[str, Any]) -> dict[str, Any]:
        run = self.current = self.run_class().resume(task, settings, context, event)
        return run.complete(event)

    def kill(self) -> None:
        if self.current is not None:
            self.current.kill()


__all__ = ["KubernetesBackend"]

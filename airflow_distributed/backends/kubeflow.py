"""What ``DistributedTrainingOperator`` does with ``backend="kubeflow"``: plan -> Kubeflow job -> status -> XCom.

The same spec is submitted as one ``TFJob``/``PyTorchJob``/``MXJob``/``MPIJob``/``XGBoostJob``/``PaddleJob``
(``manifests.kubeflow``); the Kubeflow Training Operator in the cluster creates the pods and judges them, and the
task reads its verdict from the object's ``status.conditions`` through one watch (``KubeflowJobHook``, or
``KubeflowJobTrigger`` when deferred).

``KubeflowBackend`` (the ``Backend`` of ``backend="kubeflow"``) checks the arguments when the DAG is parsed
(``check_kubeflow_arguments``: also what the spec asks that one pod template per role cannot express) and drives one
``KubeflowJobRun`` (``kubeflow_run``) per try: ``run`` (``execute``), ``resume`` (``execute_complete``:
``KubeflowJobRun.complete``) and ``kill`` (``on_kill``: ``KubeflowJobRun.kill``). Importing this module is cheap (the
operator checks its arguments with it when a DAG is parsed): ``run_class`` imports the run, and with it the hook, the
trigger and the Kubernetes clients, when a job runs.

Clean-up. The Kubeflow operator applies ``runPolicy.cleanPodPolicy`` itself when the job ends: ``Running`` (pods
still running are deleted, finished ones kept) unless ``clean_pod_policy="none"``. Its ``All`` is never asked
for, since it would delete the master's pod, and its output, before the task reads it; instead this task deletes
the job object (the pods go with it) per ``clean_pod_policy``: ``all`` always, ``running``/``none`` never; by
default after success. A killed task deletes its job whatever the policy, and so does a job failed because a
replica's image cannot be pulled (``pending_pods``): the Kubeflow operator does not see it as ended.

Retries: the object's name is fixed per task instance; a create answered 409 finds an earlier try's job, which
is reattached (running or succeeded) or replaced (failed).
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
from airflow_distributed.backends.job_run import LIVE_JOB_XCOM_KEY, check_kubernetes_arguments, ignored_in_cluster
from airflow_distributed.manifests.kubeflow_checks import kubeflow_problems
from airflow_distributed.spec.commands import own_launcher_problems
from airflow_distributed.status import ReplicaState

if TYPE_CHECKING:
    from airflow.sdk import Context

    from airflow_distributed.backends.base import ForCluster, TaskCalls
    from airflow_distributed.backends.kubeflow_run import KubeflowJobRun
    from airflow_distributed.spec import TrainingSpec


def check_kubeflow_arguments(settings: ForCluster, spec: TrainingSpec | None) -> list[tuple[str, str]]:
    """Problems with the operator's arguments for ``backend="kubeflow"``, as ``(path, message)``.

    Adds ``kubeflow_problems(spec)`` (per-index settings one pod template cannot express) for a spec that is not a
    template; a templated spec is checked when the job is built.
    """
    problems = check_kubernetes_arguments(settings, spec)
    if spec is None:
        return problems
    return problems + kubeflow_problems(spec)


class KubeflowBackend:
    """``backend="kubeflow"``: one Kubeflow Training Operator v1 job, judged by that operator."""

    name: ClassVar[str] = "kubeflow"
    options_class: ClassVar[type] = ClusterSettings

    def __init__(self) -> None:
        #: the job being waited for, for ``kill``
        self.current: KubeflowJobRun | None = None

    @staticmethod
    def run_class() -> type[KubeflowJobRun]:
        """The run of this kind of job (a backend of the same shape, ``trainjob``, names its own): the backend's one
        lazy import, so that a DAG parse loads no Kubernetes client."""
        from airflow_distributed.backends.kubeflow_run import KubeflowJobRun

        return KubeflowJobRun

    def check(self, settings: ForCluster, spec: TrainingSpec | None) -> list[tuple[str, str]]:
        return (check_kubeflow_arguments(settings, spec) + trainjob_only(settings, spec, self.name)
                + process_problems(spec)
                + launcher_problems(spec, self.name, runs=("torchrun",),
                                    why="each role's pods run one template, under torchrun only")
                + own_launcher_problems(spec, settings.command, settings.args, operator_processes=True))

    def run(self, task: TaskCalls, settings: ForCluster, context: Context, spec: TrainingSpec, job_name: str,
            command: Sequence[str]) -> dict[str, Any]:
        """Submit (or reattach) the job, then wait here or deferred.

        :returns: the ``return_value`` XCom, each key of it an XCom too; ``job`` is pushed here (also on failure).
        :raises DistributedJobError: the job failed, was deleted, or the task was killed.
        """
        run_class = self.run_class()
        log_ignored(task.log, run_class.backend, ignored_in_cluster(settings, run_class.backend))
        run = self.current = run_class.start(task, settings, context, spec, job_name, command)
        handle = run.submit()
        if not settings.wait_for_completion:
            run.log.info("%s %s/%s submitted; not waiting for it (wait_for_completion=False)", run.resource.kind,
                         run.namespace, run.name)
            return {"job_name": run.name, "namespace": run.namespace, "kind": run.resource.kind}
        # Lets the job view find the running job in the cluster before there is a final record, in both wait modes.
        context["ti"].xcom_push(key=LIVE_JOB_XCOM_KEY, value={
            "job_name": run.name, "namespace": run.namespace, "kubernetes_conn_id": settings.options.kubernetes_conn_id,
            "framework": run.framework,
        })
        if settings.deferrable and handle.reattached != ReplicaState.SUCCEEDED:
            run.defer()
        return run.wait()

    def resume(self, task: TaskCalls, settings: ForCluster, context: Context,
               event: dict[str, Any]) -> dict[str, Any]:
        run = self.current = self.run_class().resume(task, settings, context, event)
        return run.complete(event)

    def kill(self) -> None:
        if self.current is not None:
            self.current.kill()


__all__ = ["KubeflowBackend", "check_kubeflow_arguments"]

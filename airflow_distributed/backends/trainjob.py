"""What ``DistributedTrainingOperator`` does with ``backend="trainjob"``: plan -> Kubeflow Trainer v2 ``TrainJob``
-> conditions -> XCom.

The spec is submitted as one ``TrainJob`` (``manifests.trainjob``) that references a training runtime
(``runtime``, default the framework's, e.g. ``torch-distributed``; ``runtime_kind``); the Trainer controller runs it
as a JobSet and judges it. The task reads the verdict from the TrainJob's conditions through one watch
(``TrainJobHook``, or ``TrainJobTrigger`` when deferred), logs ``status.trainerStatus`` as it changes, reads node
0's output from its termination message, and pushes the XComs every backend pushes.

It is the Kubeflow backend's run (``KubeflowJobRun``: idempotent create and reattach on 409/retry, the one watch,
output, clean-up, kill) with the TrainJob's resource, hook, trigger and builder. Clean-up: Trainer 2.3 has no
``cleanPodPolicy``, so the finished nodes stay until the TrainJob is deleted: by default after success
(``clean_pod_policy`` ``all`` always, ``running``/``none`` never, as on the kubeflow backend); a killed task deletes
it whatever the policy.
"""

from __future__ import annotations

import importlib.util
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, ClassVar

from airflow_distributed.backends.base import TrainJobSettings
from airflow_distributed.backends.job_run import (
    check_kubernetes_arguments,
    job_namespace,
    manifest_options,
    require_image,
    stacks_env,
)
from airflow_distributed.backends.kubeflow import KubeflowBackend, KubeflowJobRun
from airflow_distributed.backends.local_live import LIVE_XCOM_KEY
from airflow_distributed.plan import build_plan

if TYPE_CHECKING:
    from airflow.sdk import Context

    from airflow_distributed.backends.base import ForKubernetes, TaskCalls
    from airflow_distributed.hooks.trainjob import TrainJobHook
    from airflow_distributed.manifests.kubeflow_kinds import KubeflowResource
    from airflow_distributed.spec import TrainingSpec
    from airflow_distributed.triggers.trainjob import TrainJobTrigger


#: The typed TrainJob models the ``trainjob`` extra installs (``kubeflow-trainer-api``).
MODELS_PACKAGE = "kubeflow_trainer_api"


def trainjob_options(settings: ForKubernetes) -> TrainJobSettings:
    """The options of ``backend="trainjob"`` (the training runtime's besides the Kubernetes-side ones)."""
    options = settings.options
    if not isinstance(options, TrainJobSettings):
        raise TypeError(f"backend='trainjob' receives TrainJobSettings, not {type(options).__name__}")
    return options


def check_trainjob_arguments(settings: ForKubernetes, spec: TrainingSpec | None) -> list[tuple[str, str]]:
    """Problems with the operator's arguments for ``backend="trainjob"``, as ``(path, message)``, found when the
    DAG is parsed: the framework has a Trainer v2 runtime, one pod template serves every node, and the options
    a TrainJob cannot carry are not set. Light: the typed models are imported only when a job is built."""
    from airflow_distributed.manifests.trainjob import RUNTIME_KINDS, trainjob_problems

    problems = check_kubernetes_arguments(settings)
    if importlib.util.find_spec(MODELS_PACKAGE) is None:  # found, not imported: a DAG parse stays light
        problems.append(("backend", f"backend='trainjob' needs the 'trainjob' extra, which is not installed here "
                         f"(no module {MODELS_PACKAGE!r}): pip install 'airflow-distributed[trainjob]'"))
    runtime_kind = trainjob_options(settings).runtime_kind
    if runtime_kind not in RUNTIME_KINDS:
        problems.append(("runtime_kind", f"{runtime_kind!r} is not supported; allowed: {', '.join(RUNTIME_KINDS)}"))
    for argument, why in (("gang_scheduling", "the training runtime's podGroupPolicy decides gang scheduling"),
                          ("scheduler_name", "the training runtime's pod template names the scheduler")):
        if getattr(settings.options, argument) is not None:
            problems.append((argument, f"not taken by backend='trainjob': {why}"))
    if spec is None:
        return problems
    return problems + trainjob_problems(spec, trainjob_options(settings).runtime)


# ---------------------------------------------------------------------------------------------- one job


class TrainJobRun(KubeflowJobRun):
    """One TrainJob of one task instance."""

    backend = "trainjob"
    controller = "the Kubeflow Trainer"
    # A field the installed CRD does not know is refused, not silently dropped.
    field_validation = "Strict"
    hook: TrainJobHook

    @staticmethod
    def resource_of(framework: str) -> KubeflowResource:
        from airflow_distributed.hooks.trainjob import TRAINJOB

        return TRAINJOB

    @staticmethod
    def hook_class() -> type[TrainJobHook]:
        from airflow_distributed.hooks.trainjob import TrainJobHook

        return TrainJobHook

    @classmethod
    def start(cls, task: TaskCalls, settings: ForKubernetes, context: Context, spec: TrainingSpec, job_name: str,
              command: Sequence[str]) -> TrainJobRun:
        from airflow_distributed.manifests.kubernetes import layout_for_kubernetes
        from airflow_distributed.manifests.trainjob import TrainJobAddressing, TrainJobOptions, build_trainjob

        # A templated spec was checked by check_trainjob_arguments once rendered, in execute, before this.
        require_image(settings, "trainjob")
        hook = cls.hook_class()(kubernetes_conn_id=settings.options.kubernetes_conn_id, logger=task.log)
        namespace = job_namespace(settings, hook, context["ti"].task_id)  # before anything is created
        layout = layout_for_kubernetes(settings.model_dir, job_name=job_name, checkpoint_dir=settings.checkpoint_dir)
        program = task.replica_program(list(command), layout)
        plan = build_plan(spec, job_name, TrainJobAddressing(namespace), layout, program.command,
                          backend="trainjob", env=stacks_env(settings), try_number=context["ti"].try_number,
                          files=program.files, secret_files=program.secret_files)
        own = trainjob_options(settings)
        options = TrainJobOptions(manifest_options(settings, context, namespace), runtime=own.runtime,
                                  runtime_kind=own.runtime_kind,
                                  n_proc_per_node=getattr(spec.cluster, "n_proc_per_node", None))
        run = cls(task, settings, context, hook, namespace, job_name, spec.framework)
        run.body = build_trainjob(plan, options)
        return run

    def observed(self, obj: dict[str, Any]) -> None:
        """Publish the running TrainJob for the job view (``job_live``): its state, and the progress and metrics
        the controller reports in ``status.trainerStatus``; best effort, the wait goes on whatever happens."""
        try:
            self.context["ti"].xcom_push(key=LIVE_XCOM_KEY, value=live_record(self, obj))
        except Exception as error:
            self.log.warning("could not publish the live state of TrainJob %s/%s: %s", self.namespace, self.name,
                             error)

    @staticmethod
    def trigger_class() -> type[TrainJobTrigger]:
        from airflow_distributed.triggers.trainjob import TrainJobTrigger

        return TrainJobTrigger


def live_record(run: TrainJobRun, obj: dict[str, Any]) -> dict[str, Any]:
    """A running TrainJob in the shape of the ``job`` XCom, for the job view (pure): ``progress`` in the view's
    form (``percent``, ``eta_seconds``), ``metrics`` as the controller reports them (strings), ``trainer_status``
    as it is."""
    from airflow_distributed.manifests.trainjob_status import trainer_progress, trainjob_status

    status = trainjob_status(obj)
    progress = trainer_progress(obj)
    record: dict[str, Any] = {
        "job_name": run.name, "framework": run.framework, "backend": "trainjob", "namespace": run.namespace,
        "state": status.state, "metrics": dict(progress.metrics) if progress else {}, "model_path": None,
        "history": [], "replicas": [], "logs": {},
    }
    if progress is not None:
        record["trainer_status"] = progress.as_dict()
        if progress.percent is not None:
            record["progress"] = {"percent": progress.percent, "eta_seconds": progress.remaining_seconds}
    return record


class TrainJobBackend(KubeflowBackend):
    """``backend="trainjob"``: one Kubeflow Trainer v2 ``TrainJob``; the Kubeflow backend's steps, its own run."""

    name: ClassVar[str] = "trainjob"
    options_class: ClassVar[type] = TrainJobSettings
    run_class: ClassVar[type[KubeflowJobRun]] = TrainJobRun

    def check(self, settings: ForKubernetes, spec: TrainingSpec | None) -> list[tuple[str, str]]:
        return check_trainjob_arguments(settings, spec)


__all__ = ["TrainJobBackend", "TrainJobRun", "check_trainjob_arguments", "live_record", "trainjob_options"]

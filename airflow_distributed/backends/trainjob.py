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

Importing this module is cheap (the operator checks its arguments with it when a DAG is parsed): ``run_class``
imports the run (``trainjob_run``), and with it the typed models, the hook, the trigger and the Kubernetes clients,
when a job runs.
"""

from __future__ import annotations

import importlib.util
from typing import TYPE_CHECKING, ClassVar

from airflow_distributed.backends.base import TrainJobSettings, launcher_problems, process_problems, trainjob_options
from airflow_distributed.backends.job_run import check_kubernetes_arguments
from airflow_distributed.backends.kubeflow import KubeflowBackend
from airflow_distributed.manifests.trainjob_checks import RUNTIME_KINDS, trainjob_problems
from airflow_distributed.spec.commands import own_launcher_problems

if TYPE_CHECKING:
    from airflow_distributed.backends.base import ForCluster
    from airflow_distributed.backends.kubeflow_run import KubeflowJobRun
    from airflow_distributed.spec import TrainingSpec


#: The typed TrainJob models the ``trainjob`` extra installs (``kubeflow-trainer-api``).
MODELS_PACKAGE = "kubeflow_trainer_api"


def check_trainjob_arguments(settings: ForCluster, spec: TrainingSpec | None) -> list[tuple[str, str]]:
    """Problems with the operator's arguments for ``backend="trainjob"``, as ``(path, message)``, found when the
    DAG is parsed: the framework has a Trainer v2 runtime, one pod template serves every node, and the options
    a TrainJob cannot carry are not set. Light: the typed models are imported only when a job is built."""
    problems = check_kubernetes_arguments(settings, spec)
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
    return (problems + trainjob_problems(spec, trainjob_options(settings).runtime) + process_problems(spec)
            + launcher_problems(spec, "trainjob", runs=("torchrun",), why="its runtime starts torchrun in every node")
            + own_launcher_problems(spec, settings.command, settings.args, operator_processes=True))


class TrainJobBackend(KubeflowBackend):
    """``backend="trainjob"``: one Kubeflow Trainer v2 ``TrainJob``; the Kubeflow backend's steps, its own run."""

    name: ClassVar[str] = "trainjob"
    options_class: ClassVar[type] = TrainJobSettings

    @staticmethod
    def run_class() -> type[KubeflowJobRun]:
        """The run of a TrainJob: the backend's one lazy import, so that a DAG parse loads neither the typed models
        nor a Kubernetes client."""
        from airflow_distributed.backends.trainjob_run import TrainJobRun

        return TrainJobRun

    def check(self, settings: ForCluster, spec: TrainingSpec | None) -> list[tuple[str, str]]:
        return check_trainjob_arguments(settings, spec)


__all__ = ["MODELS_PACKAGE", "TrainJobBackend", "check_trainjob_arguments", "trainjob_options"]

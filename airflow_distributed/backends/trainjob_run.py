"""One TrainJob of ``backend="trainjob"``: the Kubeflow backend's run (``KubeflowJobRun``) with the TrainJob's
resource, hook, trigger and builder, and the live record the job view shows while it runs.

Run-time: it imports the typed models (through ``manifests.trainjob``), the hook, the trigger and the Kubernetes
manifests at its top; the backend (``trainjob``) imports it when a job runs.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from airflow_distributed.backends.base import trainjob_options
from airflow_distributed.backends.job_options import manifest_options
from airflow_distributed.backends.kubeflow_run import KubeflowJobRun
from airflow_distributed.backends.local_live import LIVE_XCOM_KEY
from airflow_distributed.hooks.trainjob import TRAINJOB, TrainJobHook
from airflow_distributed.manifests.trainjob import TRAINJOB_LAUNCH, TrainJobAddressing, TrainJobOptions, build_trainjob
from airflow_distributed.manifests.trainjob_status import trainer_progress, trainjob_status
from airflow_distributed.plan import asked_processes
from airflow_distributed.status import plain
from airflow_distributed.triggers.trainjob import TrainJobTrigger

if TYPE_CHECKING:

    from airflow_distributed.manifests.kubeflow_kinds import KubeflowResource
    from airflow_distributed.plan import Addressing, ClusterPlan
    from airflow_distributed.spec import TrainingSpec


class TrainJobRun(KubeflowJobRun):
    """One TrainJob of one task instance."""

    backend = "trainjob"
    launch = TRAINJOB_LAUNCH
    controller = "the Kubeflow Trainer"
    # A field the installed CRD does not know is refused, not silently dropped.
    field_validation = "Strict"
    hook: TrainJobHook
    hook_class = TrainJobHook
    trigger_class = TrainJobTrigger

    @staticmethod
    def resource_of(framework: str) -> KubeflowResource:
        return TRAINJOB

    @staticmethod
    def addressing(namespace: str, framework: str) -> Addressing:
        return TrainJobAddressing(namespace)

    def build(self, plan: ClusterPlan, spec: TrainingSpec) -> dict[str, Any]:
        # A templated spec was checked by check_trainjob_arguments once rendered, in execute, before this.
        own = trainjob_options(self.settings)
        options = TrainJobOptions(manifest_options(self.settings, self.context, self.namespace), runtime=own.runtime,
                                  runtime_kind=own.runtime_kind,
                                  n_proc_per_node=asked_processes(spec))
        return build_trainjob(plan, options)

    def observed(self, obj: dict[str, Any]) -> None:
        """Publish the running TrainJob for the job view (``job_live``): its state, and the progress and metrics
        the controller reports in ``status.trainerStatus``; best effort, the wait goes on whatever happens."""
        try:
            self.context["ti"].xcom_push(key=LIVE_XCOM_KEY, value=live_record(self, obj))
        except Exception as error:
            self.log.warning("could not publish the live state of TrainJob %s/%s: %s", self.namespace, self.name,
                             error)


def live_record(run: TrainJobRun, obj: dict[str, Any]) -> dict[str, Any]:
    """A running TrainJob in the shape of the ``job`` XCom, for the job view (pure): ``progress`` in the view's
    form (``percent``, ``eta_seconds``), ``metrics`` as the controller reports them (strings), ``trainer_status``
    as it is."""
    status = trainjob_status(obj)
    progress = trainer_progress(obj)
    record: dict[str, Any] = {
        "job_name": run.name, "framework": run.framework, "backend": "trainjob", "namespace": run.namespace,
        "state": plain(status.state), "metrics": dict(progress.metrics) if progress else {}, "model_path": None,
        "history": [], "replicas": [],
    }
    if progress is not None:
        record["trainer_status"] = progress.as_dict()
        if progress.percent is not None:
            record["progress"] = {"percent": progress.percent, "eta_seconds": progress.remaining_seconds}
    return record


__all__ = ["TrainJobRun", "live_record"]

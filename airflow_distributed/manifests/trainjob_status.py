"""A Kubeflow Trainer v2 ``TrainJob`` read back: its state, its progress, and where its nodes' pods are (pure).

For the watcher of the ``trainjob`` backend and its trigger, on the objects ``CustomObjectsApi`` returns (dicts).
Standard library only, since the triggerer imports it; the typed models are for building (``manifests.trainjob``).

The Trainer controller (v2.3) writes ``status.conditions`` (``metav1.Condition``) of three types: ``Suspended``
(reason ``Suspended``; turned ``False`` with reason ``Resumed``), and ``Complete`` or ``Failed``, copied from its
JobSet's ``Completed``/``Failed`` (``Failed`` also with reasons ``DeadlineExceeded`` and
``TrainingRuntimeNotSupported``). ``status.jobsStatus`` counts the JobSet's child Jobs (``active``, ``ready``...);
``status.trainerStatus`` (alpha, feature gate ``TrainJobStatus``) is what the training script reports: progress
percentage, estimated remaining seconds, metrics as strings.

The nodes are the pods of the JobSet's replicated job ``node``: one indexed Job, the pod of completion index 0
being node rank 0, the Polyaxon master, whose termination message holds the output document. On an MPI runtime
(``runLauncherAsNode``) the replicated job ``launcher`` is node 0 (the Polyaxon launcher, with the output) and the
``node`` pod of completion index i is worker i.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from airflow_distributed.manifests.kubeflow_status import JobKind, JobStatus, suspended_condition
from airflow_distributed.status import ReplicaState

GROUP = "trainer.kubeflow.org"
VERSION = "v1alpha1"
PLURAL = "trainjobs"
KIND = "TrainJob"
#: The replicated job of the trainer nodes, and the name of their training container (Trainer's ``constants.Node``).
NODE = "node"
#: An MPI runtime's replicated job whose one pod runs the training command (Trainer's ``constants.Launcher``).
LAUNCHER = "launcher"
# Labels JobSet and the Job controller put on the pods of a TrainJob's JobSet (named like the TrainJob).
JOBSET_NAME_LABEL = "jobset.sigs.k8s.io/jobset-name"
REPLICATED_JOB_LABEL = "jobset.sigs.k8s.io/replicatedjob-name"
COMPLETION_INDEX_LABEL = "batch.kubernetes.io/job-completion-index"


@dataclass(frozen=True)
class TrainerProgress:
    """``status.trainerStatus``: what the training script last reported through the Trainer's status API."""

    percent: int | None = None
    remaining_seconds: int | None = None
    metrics: tuple[tuple[str, str], ...] = ()
    updated: str | None = None

    def describe(self) -> str:
        """``45% done, about 1h00m left; loss=0.23 accuracy=0.98``: what changes as training goes on."""
        parts = []
        if self.percent is not None:
            parts.append(f"{self.percent}% done")
        if self.remaining_seconds is not None:
            parts.append(f"about {_duration(self.remaining_seconds)} left")
        text = ", ".join(parts)
        if self.metrics:
            text += ("; " if text else "") + " ".join(f"{name}={value}" for name, value in self.metrics)
        return text

    def as_dict(self) -> dict[str, Any]:
        """JSON-safe, for the job record and the job view."""
        return {"progress_percentage": self.percent, "estimated_remaining_seconds": self.remaining_seconds,
                "metrics": dict(self.metrics), "last_updated_time": self.updated}


def trainer_progress(obj: Mapping[str, Any]) -> TrainerProgress | None:
    """``status.trainerStatus``, or ``None`` when the controller has none (feature gate off, nothing reported)."""
    found = (obj.get("status") or {}).get("trainerStatus")
    if not isinstance(found, Mapping):
        return None
    metrics = tuple(
        (str(item.get("name")), str(item.get("value")))
        for item in found.get("metrics") or [] if isinstance(item, Mapping) and item.get("name")
    )
    return TrainerProgress(_int(found.get("progressPercentage")), _int(found.get("estimatedRemainingSeconds")),
                           metrics, found.get("lastUpdatedTime"))


def trainjob_status(obj: Mapping[str, Any]) -> JobStatus:
    """The state of a TrainJob: ``Failed`` or ``Complete`` decide; a ``Suspended`` one is pending (e.g. waiting for
    Kueue to admit it); else running once a child Job is active, with the trainer's progress as the message."""
    status = obj.get("status") or {}
    conditions = {c.get("type"): c for c in status.get("conditions") or [] if isinstance(c, Mapping)}
    for kind, state in (("Failed", ReplicaState.FAILED), ("Complete", ReplicaState.SUCCEEDED)):
        condition = conditions.get(kind)
        if condition is not None and condition.get("status") == "True":
            return JobStatus(state, condition.get("reason") or kind, condition.get("message") or "")
    suspended = conditions.get("Suspended")
    if suspended is not None and suspended.get("status") == "True":
        return JobStatus(ReplicaState.PENDING, suspended.get("reason") or "Suspended", suspended.get("message") or "")
    progress = trainer_progress(obj)
    message = progress.describe() if progress is not None else ""
    jobs = [job for job in status.get("jobsStatus") or [] if isinstance(job, Mapping)]
    if any(_int(job.get("active")) or _int(job.get("ready")) for job in jobs):
        return JobStatus(ReplicaState.RUNNING, "Running", message)
    if suspended is not None:  # resumed, nodes not started yet
        return JobStatus(ReplicaState.PENDING, suspended.get("reason") or "Resumed", suspended.get("message") or "")
    return JobStatus(ReplicaState.PENDING, "", message or "the Trainer controller has not started the nodes yet")


def trainjob_suspended(obj: Mapping[str, Any] | None) -> bool:
    """The TrainJob is suspended (``spec.suspend``, or a ``Suspended`` condition still ``True``): no node pods on
    purpose, e.g. until Kueue admits it (its webhook sets ``spec.suspend`` before the controller's condition)."""
    if not obj:
        return False
    return (obj.get("spec") or {}).get("suspend") is True or suspended_condition(obj)


def node_selector(job_name: str, rank: int | None = None) -> str:
    """A label selector for the TrainJob's node pods (an MPI runtime's launcher included), or those of completion
    index ``rank``."""
    parts = [f"{JOBSET_NAME_LABEL}={job_name}", f"{REPLICATED_JOB_LABEL} in ({LAUNCHER},{NODE})"]
    if rank is not None:
        parts.append(f"{COMPLETION_INDEX_LABEL}={rank}")
    return ",".join(parts)


def expected_nodes(obj: Mapping[str, Any] | None) -> int | None:
    """How many node pods a TrainJob asks for (``spec.trainer.numNodes``; ``None``: not known from ``obj``, as when
    the runtime gives the count)."""
    trainer = ((obj or {}).get("spec") or {}).get("trainer") or {}
    nodes = trainer.get("numNodes")
    return int(nodes) if isinstance(nodes, int) else None


def node_rank(pod: Mapping[str, Any]) -> int:
    """A node pod's rank: its completion index (a label since Kubernetes 1.28, an annotation before)."""
    metadata = pod.get("metadata") or {}
    for where in ("labels", "annotations"):
        value = (metadata.get(where) or {}).get(COMPLETION_INDEX_LABEL)
        if value is not None and str(value).isdigit():
            return int(value)
    return 0


def is_launcher(pod: Mapping[str, Any]) -> bool:
    """The pod is an MPI runtime's launcher."""
    return ((pod.get("metadata") or {}).get("labels") or {}).get(REPLICATED_JOB_LABEL) == LAUNCHER


def _int(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _duration(seconds: int) -> str:
    hours, rest = divmod(max(0, seconds), 3600)
    minutes, secs = divmod(rest, 60)
    if hours:
        return f"{hours}h{minutes:02d}m"
    return f"{minutes}m{secs:02d}s" if minutes else f"{secs}s"


#: TrainJobs: judged by their conditions, their pods the JobSet's node (and launcher) pods.
TRAINJOB_KIND = JobKind(trainjob_status, node_selector, expected_nodes, trainjob_suspended)


__all__ = [
    "COMPLETION_INDEX_LABEL",
    "GROUP",
    "JOBSET_NAME_LABEL",
    "KIND",
    "LAUNCHER",
    "NODE",
    "PLURAL",
    "REPLICATED_JOB_LABEL",
    "TRAINJOB_KIND",
    "VERSION",
    "TrainerProgress",
    "expected_nodes",
    "is_launcher",
    "node_rank",
    "node_selector",
    "trainer_progress",
    "trainjob_status",
    "trainjob_suspended",
]

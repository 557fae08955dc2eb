"""A Kubeflow training job read back: its state, its replicas' counts, and which replica decides success (pure).

For the sensors and the watcher of the ``kubeflow`` backend, on the objects ``CustomObjectsApi`` returns (dicts).
Light on purpose (standard library, the kinds' table ``kubeflow_kinds`` and ``frameworks`` only), since triggers
import it in the triggerer.

States are those of ``airflow_distributed.status``. The operators write ``status.conditions`` of types
``Created``, ``Running``, ``Restarting``, ``Succeeded``, ``Failed`` (and ``Suspended`` for a suspended job), each
``True`` or ``False``; when a job ends, its ``Running`` condition is turned ``False``. The state is the ``True``
condition with the latest ``lastTransitionTime`` (the later in the list on a tie), a ``Succeeded`` or ``Failed``
one winning over any other, since a finished job never runs again.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Any, NamedTuple

from airflow_distributed.manifests.gang_scheduling import (
    COSCHEDULING_API_VERSION,
    VOLCANO_API_VERSION,
    VOLCANO_SCHEDULER,
)
from airflow_distributed.manifests.kubeflow_kinds import BY_KIND, SuccessRule
from airflow_distributed.status import ReplicaState

# Labels the operators put on the pods (and Services) they create for a job.
JOB_NAME_LABEL = "training.kubeflow.org/job-name"
REPLICA_TYPE_LABEL = "training.kubeflow.org/replica-type"
REPLICA_INDEX_LABEL = "training.kubeflow.org/replica-index"

#: Kind -> the spec key of its replica specs (``TFJob`` -> ``tfReplicaSpecs``), from the kinds' table.
REPLICA_SPECS_KEY: Mapping[str, str] = {name: kind.replica_specs_key for name, kind in BY_KIND.items()}

CONDITION_STATES: dict[str, str] = {
    "Created": ReplicaState.PENDING,
    "Suspended": ReplicaState.PENDING,
    "Running": ReplicaState.RUNNING,
    # A replica failed and is being replaced; with restartPolicy Never only another controller's jobs get here.
    "Restarting": ReplicaState.RUNNING,
    "Succeeded": ReplicaState.SUCCEEDED,
    "Failed": ReplicaState.FAILED,
}
_TERMINAL = ("Succeeded", "Failed")
_EARLIEST = datetime.min.replace(tzinfo=timezone.utc)


class JobStatus(NamedTuple):
    """``state`` (``pending``/``running``/``succeeded``/``failed``), and the deciding condition's reason and message."""

    state: str
    reason: str
    message: str


@dataclass(frozen=True)
class ReplicaCounts:
    active: int = 0
    succeeded: int = 0
    failed: int = 0


def job_status(obj: Mapping[str, Any]) -> JobStatus:
    """The state of a Kubeflow job from its ``status.conditions`` (see the module docstring)."""
    status = obj.get("status") or {}
    conditions = [
        (position, condition)
        for position, condition in enumerate(status.get("conditions") or [])
        if condition.get("status") == "True" and condition.get("type") in CONDITION_STATES
    ]
    if not conditions:
        return JobStatus(ReplicaState.PENDING, "", "the operator has not reported on the job yet")
    terminal = [item for item in conditions if item[1]["type"] in _TERMINAL]
    _, chosen = max(terminal or conditions, key=lambda item: (_transition_time(item[1]), item[0]))
    message = chosen.get("message") or ""
    if chosen["type"] == "Failed" and not message:
        message = _failed_replicas(status)
    return JobStatus(CONDITION_STATES[chosen["type"]], chosen.get("reason") or chosen["type"], message)


def job_suspended(obj: Mapping[str, Any] | None) -> bool:
    """The job is suspended (``runPolicy.suspend``, or a ``Suspended`` condition still ``True``): it has no pods on
    purpose. The spec counts too since Kueue's webhook suspends a queued job as it is created, before the operator
    writes the condition; a resumed job has the condition turned ``False`` (reason ``...Resumed``)."""
    if not obj:
        return False
    return ((obj.get("spec") or {}).get("runPolicy") or {}).get("suspend") is True or suspended_condition(obj)


def suspended_condition(obj: Mapping[str, Any]) -> bool:
    """A ``Suspended`` condition is ``True`` (the Kubeflow operators' and the Trainer controller's own type)."""
    return any(condition.get("type") == "Suspended" and condition.get("status") == "True"
               for condition in (obj.get("status") or {}).get("conditions") or [] if isinstance(condition, Mapping))


def expected_pods(obj: Mapping[str, Any] | None) -> int | None:
    """How many pods a Kubeflow job's replica specs ask for (``None``: not known from ``obj``)."""
    if not obj:
        return None
    key = REPLICA_SPECS_KEY.get(str(obj.get("kind")))
    specs = (obj.get("spec") or {}).get(key) if key else None
    if not isinstance(specs, Mapping):
        return None
    return sum(int((spec or {}).get("replicas", 1)) for spec in specs.values())


@dataclass(frozen=True)
class JobKind:
    """How a waiter reads the objects of one custom job kind. One object per kind, held by its hook and its trigger
    alike, so that the synchronous and the deferred waits judge a job the same way."""

    #: the job's state from its conditions
    status_of: Callable[[Mapping[str, Any]], JobStatus]
    #: the label selector of a job's pods (the pull-failure check's LISTs)
    pods_selector: Callable[[str], str]
    #: how many pods the job asks for (``None``: not known from the object)
    expected_pods: Callable[[Mapping[str, Any] | None], int | None]
    #: whether the object says the job is suspended (no pods on purpose, no pod LISTs then)
    suspended_of: Callable[[Mapping[str, Any] | None], bool]
    #: the gang scheduler's PodGroup the job's controller makes for it (``pod_group_of``), ``None``: none
    pod_group_of: Callable[[Mapping[str, Any] | None], PodGroupRef | None] = lambda obj: None


class PodGroupRef(NamedTuple):
    """Where a job's PodGroup is: its API group, version and plural, and its name."""

    group: str
    version: str
    plural: str
    name: str


def pod_group_of(obj: Mapping[str, Any] | None) -> PodGroupRef | None:
    """The PodGroup the Kubeflow operator makes for a gang-scheduled job (``runPolicy.schedulingPolicy`` set), named
    after the job: Volcano's when the pods are scheduled by ``volcano`` (as the backend's ``gang_scheduling=
    "volcano"`` asks), else scheduler-plugins'. With Volcano, the operator creates no pod until the group is
    admitted (``Inqueue``): until then only the group tells that the job waits for capacity."""
    if not obj or not isinstance(((obj.get("spec") or {}).get("runPolicy") or {}).get("schedulingPolicy"), Mapping):
        return None
    specs = (obj.get("spec") or {}).get(REPLICA_SPECS_KEY.get(str(obj.get("kind")), "")) or {}
    volcano = any((((spec or {}).get("template") or {}).get("spec") or {}).get("schedulerName") == VOLCANO_SCHEDULER
                  for spec in specs.values()) if isinstance(specs, Mapping) else False
    group, version = (VOLCANO_API_VERSION if volcano else COSCHEDULING_API_VERSION).split("/")
    return PodGroupRef(group, version, "podgroups", str((obj.get("metadata") or {}).get("name")))



def replica_statuses(obj: Mapping[str, Any]) -> dict[str, ReplicaCounts]:
    """``status.replicaStatuses`` as counts per replica type (``Worker``, ...); absent counts are 0."""
    statuses = (obj.get("status") or {}).get("replicaStatuses") or {}
    return {
        rtype: ReplicaCounts(
            active=int(counts.get("active") or 0),
            succeeded=int(counts.get("succeeded") or 0),
            failed=int(counts.get("failed") or 0),
        )
        for rtype, counts in statuses.items()
    }


def success_rule(obj: Mapping[str, Any]) -> SuccessRule:
    """Which replica's end decides a job's success, per kind (training-operator 1.8/1.9, mpi-operator v2beta1).

    - TFJob: the Chief (or the older Master) if there is one; else worker 0 (``successPolicy`` unset), or every
      worker (``successPolicy: AllWorkers``).
    - PyTorchJob: the Master if there is one; else every Worker (with an ``elasticPolicy``: any one Worker).
    - MXJob: the Scheduler.
    - MPIJob: the Launcher.
    - XGBoostJob: the Master.
    - PaddleJob: the Master if there is one (the operator's PS mode, this project's collective jobs); else every
      Worker (the operator's collective mode).

    :raises ValueError: a kind that is not one of these, or a job without the replica type that would decide.
    """
    name = obj.get("kind")
    if name not in BY_KIND:
        raise ValueError(f"{name!r} is not a Kubeflow training job kind; known: {', '.join(BY_KIND)}")
    kind = BY_KIND[str(name)]
    spec = obj.get("spec") or {}
    types = set(spec.get(kind.replica_specs_key) or {})
    for master in kind.master_types:
        if master in types:
            return SuccessRule(master, 0, False, f"the {master} succeeded")
    if kind.success_without_master is None:
        raise ValueError(f"{kind.kind} {_name(obj)} has no {kind.master_type}, whose end decides its success")
    return kind.success_without_master(spec)


def pod_selector(job_name: str, replica_type: str | None = None, index: int | None = None) -> str:
    """A label selector for a job's pods, or those of one replica type (and index)."""
    parts = [f"{JOB_NAME_LABEL}={job_name}"]
    if replica_type is not None:
        parts.append(f"{REPLICA_TYPE_LABEL}={replica_type.lower()}")
    if index is not None:
        parts.append(f"{REPLICA_INDEX_LABEL}={index}")
    return ",".join(parts)


def master_pod_selector(obj: Mapping[str, Any]) -> str:
    """The pod whose main container's termination message holds the output document: the deciding replica's.

    The MPIJob launcher's pod belongs to a batch Job and has no index label, so it is selected by type alone.
    """
    rule = success_rule(obj)
    index = rule.index if obj.get("kind") != "MPIJob" else None
    return pod_selector(_name(obj), rule.replica_type, index)


def _name(obj: Mapping[str, Any]) -> str:
    return str((obj.get("metadata") or {}).get("name", ""))


def _transition_time(condition: Mapping[str, Any]) -> datetime:
    value = condition.get("lastTransitionTime") or condition.get("lastUpdateTime")
    if not value:
        return _EARLIEST
    try:
        parsed = datetime.fromisoformat(str(value).replace("Z", "+00:00"))
    except ValueError:
        return _EARLIEST
    return parsed if parsed.tzinfo else parsed.replace(tzinfo=timezone.utc)


def _failed_replicas(status: Mapping[str, Any]) -> str:
    failed = [
        f"{counts.failed} {rtype}" for rtype, counts in sorted(replica_statuses({"status": status}).items())
        if counts.failed
    ]
    return f"failed replicas: {', '.join(failed)}" if failed else ""


#: The Kubeflow Training Operator's jobs (TFJob, PyTorchJob, MXJob, MPIJob, XGBoostJob, PaddleJob).
KUBEFLOW_KIND = JobKind(job_status, pod_selector, expected_pods, job_suspended, pod_group_of)

"""Gang scheduling and queueing of a job's pods, so that all its replicas start together or none does.

- Volcano: a ``scheduling.volcano.sh/v1beta1`` PodGroup; pods name it in the ``scheduling.k8s.io/group-name``
  annotation and are scheduled by ``volcano``.
- scheduler-plugins (Coscheduling): a ``scheduling.x-k8s.io/v1alpha1`` PodGroup; pods name it in the
  ``scheduling.x-k8s.io/pod-group`` label. The scheduler is the cluster's default one when the plugins replace
  it, else the name given (the project's Helm chart installs ``scheduler-plugins-scheduler``).
- Kueue (plain pods): no extra object; every pod carries the queue label, the group name and the group's
  size, and Kueue admits the pods as one workload.

Pure.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from decimal import Decimal
from typing import TYPE_CHECKING, Any, Literal

from airflow_distributed.spec.quantities import MIB, parse_quantity

if TYPE_CHECKING:
    # Named in annotations only: the backends' parse-time checks import this module without the client.
    from kubernetes import client

GangScheduler = Literal["volcano", "scheduler-plugins"]
GANG_SCHEDULERS: tuple[str, ...] = ("volcano", "scheduler-plugins")

VOLCANO_API_VERSION = "scheduling.volcano.sh/v1beta1"
VOLCANO_SCHEDULER = "volcano"
VOLCANO_GROUP_ANNOTATION = "scheduling.k8s.io/group-name"
COSCHEDULING_API_VERSION = "scheduling.x-k8s.io/v1alpha1"
COSCHEDULING_GROUP_LABEL = "scheduling.x-k8s.io/pod-group"
KUEUE_QUEUE_LABEL = "kueue.x-k8s.io/queue-name"
KUEUE_GROUP_LABEL = "kueue.x-k8s.io/pod-group-name"
KUEUE_GROUP_TOTAL_ANNOTATION = "kueue.x-k8s.io/pod-group-total-count"
KUEUE_RETRIABLE_ANNOTATION = "kueue.x-k8s.io/retriable-in-group"


@dataclass(frozen=True)
class PodGrouping:
    """What every pod of a job carries for its gang scheduler and queue."""

    labels: dict[str, str] = field(default_factory=dict)
    annotations: dict[str, str] = field(default_factory=dict)
    scheduler_name: str | None = None


def pod_grouping(
    job_name: str,
    replica_count: int,
    gang_scheduling: GangScheduler | None,
    queue_name: str | None,
    scheduler_name: str | None,
) -> PodGrouping:
    labels: dict[str, str] = {}
    annotations: dict[str, str] = {}
    if gang_scheduling == "volcano":
        annotations[VOLCANO_GROUP_ANNOTATION] = job_name
        scheduler_name = scheduler_name or VOLCANO_SCHEDULER
    elif gang_scheduling == "scheduler-plugins":
        labels[COSCHEDULING_GROUP_LABEL] = job_name
    if queue_name:
        labels[KUEUE_QUEUE_LABEL] = queue_name
        labels[KUEUE_GROUP_LABEL] = job_name
        annotations[KUEUE_GROUP_TOTAL_ANNOTATION] = str(replica_count)
        # A failed replica is never replaced (restart policy Never): Kueue should end the workload and free
        # the quota at once instead of waiting for a replacement pod.
        annotations[KUEUE_RETRIABLE_ANNOTATION] = "false"
    return PodGrouping(labels, annotations, scheduler_name)


def pod_group(
    job_name: str,
    namespace: str,
    gang_scheduling: GangScheduler | None,
    pods: Sequence[client.V1Pod],
    labels: Mapping[str, str],
    annotations: Mapping[str, str],
) -> dict[str, Any] | None:
    """The PodGroup of the job, or ``None`` without gang scheduling. A dict: the client has no model for CRDs."""
    if gang_scheduling is None:
        return None
    metadata: dict[str, Any] = {"name": job_name, "namespace": namespace, "labels": dict(labels)}
    if annotations:
        metadata["annotations"] = dict(annotations)
    # Every replica is needed: a job with one replica missing waits forever, holding the others' nodes.
    spec: dict[str, Any] = {"minMember": len(pods)}
    resources = min_resources(pods)
    if resources:
        # Lets the scheduler (and Volcano's queue admission) refuse a job the cluster cannot hold as a whole.
        spec["minResources"] = resources
    api_version = VOLCANO_API_VERSION if gang_scheduling == "volcano" else COSCHEDULING_API_VERSION
    return {"apiVersion": api_version, "kind": "PodGroup", "metadata": metadata, "spec": spec}


def min_resources(pods: Iterable[client.V1Pod]) -> dict[str, str]:
    """Sum of what the scheduler reserves for each pod, as quantity strings."""
    total: dict[str, Decimal] = {}
    for pod in pods:
        for key, value in pod_requests(pod).items():
            total[key] = total.get(key, Decimal(0)) + value
    return {key: format_quantity(value) for key, value in sorted(total.items()) if value > 0}


def pod_requests(pod: client.V1Pod) -> dict[str, Decimal]:
    """A pod's effective requests: the larger of its containers' sum and its largest init container."""
    requests: dict[str, Decimal] = {}
    for container in pod.spec.containers:
        for key, value in _container_requests(container).items():
            requests[key] = requests.get(key, Decimal(0)) + value
    for container in pod.spec.init_containers or ():
        for key, value in _container_requests(container).items():
            requests[key] = max(requests.get(key, Decimal(0)), value)
    return requests


def _container_requests(container: client.V1Container) -> dict[str, Decimal]:
    resources = container.resources
    if resources is None:
        return {}
    # A limit without a request means a request of the same amount (Kubernetes defaulting).
    amounts = {**(resources.limits or {}), **(resources.requests or {})}
    return {key: parse_quantity(str(value)) for key, value in amounts.items()}


def format_quantity(value: Decimal) -> str:
    """A sum in base units as a quantity: whole MiB as ``Mi``, other whole numbers as is, fractions in ``m``."""
    if value == value.to_integral_value():
        if value >= MIB and value % MIB == 0:
            return f"{int(value / MIB)}Mi"
        return str(int(value))
    return f"{math.ceil(value * 1000)}m"

"""Trainer v2 backend I/O: submit a ``TrainJob``, watch it, read node 0's output, delete it.

``TrainJobHook`` is a Kubeflow hook (same connection, retries, idempotent create, one watch of the object
resumed from its resourceVersion) with the TrainJob's own verdict (``trainjob_status``: the ``Complete``/``Failed``/
``Suspended`` conditions) and the pods of its JobSet, found by JobSet's labels rather than the Training Operator's.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from airflow_distributed.hooks.kubeflow import KubeflowJobHook
from airflow_distributed.jobstate.kubeflow_pods import replica_statuses_of_pods
from airflow_distributed.jobstate.pod_state import termination_message
from airflow_distributed.manifests.kubeflow_kinds import KubeflowResource
from airflow_distributed.manifests.kubeflow_status import JobKind
from airflow_distributed.manifests.trainjob_status import (
    GROUP,
    KIND,
    NODE,
    PLURAL,
    TRAINJOB_KIND,
    VERSION,
    is_launcher,
    node_rank,
    node_selector,
)
from airflow_distributed.status import ReplicaStatus

#: What ``CustomObjectsApi`` calls take to address a TrainJob.
TRAINJOB = KubeflowResource(GROUP, VERSION, PLURAL, KIND)


def node_replica(pod: Mapping[str, Any], mpi: bool = False) -> tuple[str, int]:
    """A node pod's (role, index), Polyaxon's roles: node 0 is the master, node i worker i-1; on an MPI runtime
    (``mpi``) the launcher pod is the launcher and ``node`` pod i is worker i."""
    if is_launcher(pod):
        return ("launcher", 0)
    rank = node_rank(pod)
    if mpi:
        return ("worker", rank)
    return ("master", 0) if rank == 0 else ("worker", rank - 1)


def node_statuses(pods: Sequence[Mapping[str, Any]], container: str = NODE) -> tuple[ReplicaStatus, ...]:
    """The table's rows for a TrainJob's node pods. A launcher among them makes it an MPI job (before JobSet
    creates the launcher, once the nodes are ready, the nodes are numbered as on the other runtimes)."""
    mpi = any(is_launcher(pod) for pod in pods)
    return replica_statuses_of_pods(pods, container, lambda pod: node_replica(pod, mpi))


class TrainJobHook(KubeflowJobHook):
    """Run distributed training jobs as Kubeflow Trainer v2 ``TrainJob`` objects (same arguments as
    ``PodJobHook``); pass ``TRAINJOB`` as the resource to the Kubeflow hook's calls."""

    hook_name = "Distributed training (Kubeflow Trainer)"
    kind: JobKind = TRAINJOB_KIND

    @classmethod
    def main_container(cls, obj: Mapping[str, Any]) -> str:
        return NODE

    @classmethod
    def replica_statuses(cls, pods: Sequence[Mapping[str, Any]], container: str) -> tuple[ReplicaStatus, ...]:
        return node_statuses(pods, container)

    @classmethod
    def master_selector(cls, obj: Mapping[str, Any]) -> str:
        """Node 0's pods (an MPI runtime's launcher included)."""
        return node_selector(str((obj.get("metadata") or {}).get("name")), rank=0)

    @classmethod
    def master_pod(cls, obj: Mapping[str, Any], pods: Sequence[Mapping[str, Any]]) -> Mapping[str, Any] | None:
        """Node 0 (an MPI runtime's launcher), the newest should the Job controller have replaced it: the pod whose
        log the hang watchdog reads."""
        found = [pod for pod in pods if is_launcher(pod)] or [pod for pod in pods if node_rank(pod) == 0]
        return max(found, key=lambda p: p["metadata"].get("creationTimestamp") or "", default=None)

    def kubeflow_output(self, namespace: str, obj: Mapping[str, Any]) -> str | None:
        """The output document: the termination message of node 0's ``node`` container (an MPI runtime's launcher;
        the newest such pod, should the Job controller have replaced one)."""
        pods = self.list_pods(namespace, self.master_selector(obj))
        newest_first = sorted(pods, key=lambda p: p["metadata"].get("creationTimestamp") or "", reverse=True)
        for pod in sorted(newest_first, key=lambda p: not is_launcher(p)):
            text = termination_message(pod, NODE)
            if text:
                return text
        return None


__all__ = ["TRAINJOB", "TrainJobHook", "node_replica", "node_statuses"]

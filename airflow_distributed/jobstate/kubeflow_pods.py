"""The pods a controller made for a custom-object job (a Kubeflow v1 kind's, a TrainJob's JobSet's), read back
(pure: pods in, rows and verdicts out): the replica table's rows, the replica whose failure ended the job, the one
the cluster took away, and which pods a label selector names. The task's wait, the trigger, the sensors and the
resumed task read them alike.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import replace
from typing import Any

from airflow_distributed.jobstate.disruption import pod_disruption
from airflow_distributed.jobstate.outcome import Ending
from airflow_distributed.jobstate.pod_state import (
    ContainerState,
    ReplicaExit,
    container_state,
    deciding_exit,
    pod_counts,
)
from airflow_distributed.jobstate.verdicts import JobVerdict
from airflow_distributed.manifests.kubeflow_status import REPLICA_INDEX_LABEL, REPLICA_TYPE_LABEL
from airflow_distributed.manifests.kubernetes import ROLE_LABEL
from airflow_distributed.status import ReplicaState, ReplicaStatus


def _replica_of_pod(pod: Mapping[str, Any]) -> tuple[str, int]:
    labels = (pod.get("metadata") or {}).get("labels") or {}
    role = labels.get(ROLE_LABEL) or str(labels.get(REPLICA_TYPE_LABEL, "replica")).lower()
    return role, int(labels.get(REPLICA_INDEX_LABEL) or 0)


def replica_statuses_of_pods(
    pods: Sequence[Mapping[str, Any]], container: str,
    replica_of: Callable[[Mapping[str, Any]], tuple[str, int]] = _replica_of_pod,
) -> tuple[ReplicaStatus, ...]:
    """The table's rows for a Kubeflow job's pods, by replica type and index.

    :param replica_of: a pod's (role, index); by default from the Training Operator's labels.
    """
    rows = []
    for pod in pods:
        role, index = replica_of(pod)
        where = (pod.get("spec") or {}).get("nodeName") or ""
        state, fields = container_state(pod, container)
        name = pod["metadata"]["name"]
        if state == ContainerState.TERMINATED:
            code = fields.get("exitCode")
            ended = ReplicaState.SUCCEEDED if code == 0 else ReplicaState.FAILED
            row = ReplicaStatus(name, role, index, ended, code, where,
                                reason=fields.get("reason") if code != 0 else None)
        elif (pod.get("status") or {}).get("phase") == "Failed":
            row = ReplicaStatus(name, role, index, ReplicaState.FAILED, None, where,
                                reason=(pod.get("status") or {}).get("reason"))
        else:
            running = state == ContainerState.RUNNING
            row = ReplicaStatus(name, role, index, ReplicaState.RUNNING if running else ReplicaState.PENDING,
                                None, where)
        processes, gpus = pod_counts(pod)
        rows.append(replace(row, processes=processes, gpus=gpus))
    return tuple(sorted(rows, key=lambda row: (row.role, row.index, row.name)))


def failed_replica(pods: Sequence[Mapping[str, Any]], container: str) -> JobVerdict | None:
    """The replica whose failure ended the job (its ``describe()``: ``replica <pod> exited with code 3
    (OOMKilled)``), by the rule of every backend (``pod_state.deciding_exit``): one the cluster took away
    (``disruption.pod_disruption``), else the first to fail, since its peers fail moments later when they lose it."""
    exits = []
    for pod in pods:
        state, fields = container_state(pod, container)
        if state == ContainerState.TERMINATED and fields.get("exitCode") not in (None, 0):
            exits.append(ReplicaExit(pod["metadata"]["name"], container, fields, pod_disruption(pod)))
    found = deciding_exit(exits)
    if found is not None:
        fields = found.state
        return JobVerdict(ReplicaState.FAILED, found.replica, Ending.EXITED, fields.get("exitCode"),
                          fields.get("reason"), fields.get("message"), disruption=found.disruption)
    # A pod taken away first, as above; ``sorted`` keeps the pods' order otherwise.
    for pod in sorted(pods, key=lambda pod: pod_disruption(pod) is None):
        status = pod.get("status") or {}
        if status.get("phase") == "Failed":
            return JobVerdict(ReplicaState.FAILED, pod["metadata"]["name"], Ending.POD_FAILED, None,
                              status.get("reason"), status.get("message"), disruption=pod_disruption(pod))
    return None


def lost_replica(gone: Sequence[Mapping[str, Any]]) -> JobVerdict | None:
    """The replica of the first pod the cluster took away and deleted before the job's end (``TakenAway.gone``),
    when no exit of it was seen: its pod was deleted or evicted."""
    if not gone:
        return None
    pod = gone[0]
    return JobVerdict(ReplicaState.FAILED, pod["metadata"]["name"], Ending.DELETED, disruption=pod_disruption(pod))


def pod_matches(pod: Mapping[str, Any], selector: str) -> bool:
    """Whether a pod's labels satisfy an equality selector (``a=b,c=d``, as ``kubeflow_status`` builds them)."""
    labels = (pod.get("metadata") or {}).get("labels") or {}
    return all(labels.get(key) == value for key, _, value in (part.partition("=") for part in selector.split(",")))


__all__ = ["failed_replica", "lost_replica", "pod_matches", "replica_statuses_of_pods"]

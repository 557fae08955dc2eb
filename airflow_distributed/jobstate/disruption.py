"""Whether the cluster is taking a pod away, and how, in the words of a failure message (pure: the API server's
JSON in, values out).

The one rule of every backend and wait mode (the ``kubernetes`` tracker, the Kubeflow and TrainJob verdicts, the
sensors): a pod whose deletion has begun, or that the cluster marks as disrupted, was taken away, whatever its
container did as it went (143 after the SIGTERM of a graceful deletion, 137 after a kill). ``failures`` makes such a
replica's ending a ``ReplicaLostError``; ``outcome`` words it with ``taken_away``.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

#: A pod's own reason when the node or the scheduler took it away: evicted (node pressure), preempted, its node lost
#: or shut down (graceful node shutdown says ``Terminated``, older releases ``Shutdown``/``NodeShutdown``).
LOST_POD_REASONS = frozenset({"Evicted", "Preempting", "NodeLost", "NodeShutdown", "Shutdown", "Terminated"})
#: The disruption of a pod whose deletion has begun (it has a ``deletionTimestamp``) with nothing else saying why.
#: Someone deleted it (``kubectl delete pod``) or the Eviction API evicted it (``kubectl drain``): a server before
#: 1.26 sets no ``DisruptionTarget`` condition on an eviction, and an eviction leaves the pod exactly as a deletion
#: with the same grace period does, so the two cannot be told apart.
DELETION_STARTED = "DeletionStarted"

#: What took the pod, by disruption: the ``DisruptionTarget`` condition's reasons (1.26 and later; the alpha's names
#: too), the pod's own ``LOST_POD_REASONS``, and ``DELETION_STARTED``.
_TAKEN_AWAY = {
    "EvictionByEvictionAPI": "evicted",
    "PreemptionByKubeScheduler": "preempted",
    "PreemptionByScheduler": "preempted",
    "Preempting": "preempted",
    "DeletionByTaintManager": "lost with its node",
    "DeletionByPodGC": "lost with its node",
    "NodeLost": "lost with its node",
    "TerminationByKubelet": "evicted or stopped by its node (resource pressure or shutdown)",
    "Evicted": "evicted by its node (resource pressure)",
    "NodeShutdown": "stopped by its node's shutdown",
    "Shutdown": "stopped by its node's shutdown",
    "Terminated": "stopped by its node's shutdown",
    DELETION_STARTED: "deleted or evicted",
}


def pod_disruption(pod: Mapping[str, Any] | None) -> str | None:
    """How the cluster is taking this pod away, if it is, the most telling sign first: the reason of its
    ``DisruptionTarget`` condition (set before an eviction, a preemption, a taint's or the pod GC's deletion of a
    lost node's pods, on 1.26 and later), else its own reason when that is one of ``LOST_POD_REASONS`` (the
    kubelet's eviction, a lost node), else ``DELETION_STARTED`` when its deletion has begun; ``None`` for a pod
    nobody is taking away."""
    pod = pod or {}
    status = pod.get("status") or {}
    for condition in status.get("conditions") or []:
        if condition.get("type") == "DisruptionTarget" and condition.get("status") == "True":
            return condition.get("reason") or "DisruptionTarget"
    reason = status.get("reason")
    if reason in LOST_POD_REASONS:
        return str(reason)
    if (pod.get("metadata") or {}).get("deletionTimestamp"):
        return DELETION_STARTED
    return None


def taken_away(disruption: str) -> str:
    """What took a pod, for a failure message: ``evicted (EvictionByEvictionAPI)``, ``deleted or
    evicted``; a reason this release does not know is named as it is."""
    words = _TAKEN_AWAY.get(disruption)
    if words is None:
        return f"taken away by the cluster ({disruption})"
    return words if disruption == DELETION_STARTED else f"{words} ({disruption})"


class TakenAway:
    """The pods of a job whose controller makes them (a Kubeflow job's, a TrainJob's) that the cluster was seen
    taking away, each as last seen: kept across reads, and across a deferral (``as_dict``, in the trigger's event).

    The controller judges such a job after the pod has gone: a pod evicted or deleted gets its SIGTERM, its
    container exits 143, the kubelet finishes the deletion, and only then does the controller (which saw the
    failed container) mark the job failed; the pods listed at the job's end no longer have it. What the waits saw
    of it while it went (a watch of the job's pods sees every change, and the pod as it was when deleted) says the
    cluster took it, so that the verdict is the replica lost, not the controller's count of failed replicas.

    :param pods: pods recorded before (``from_dict``), by uid.
    """

    def __init__(self, pods: Mapping[str, Mapping[str, Any]] | None = None) -> None:
        self.pods: dict[str, Mapping[str, Any]] = dict(pods or {})

    def observe(self, pod: Mapping[str, Any]) -> None:
        """A pod as a read or a watch event showed it (a ``DELETED`` event's is its last state): kept if the
        cluster is taking it away, only what a verdict reads of it (its name, uid, deletion and status)."""
        if pod_disruption(pod) is None:
            return
        metadata = pod.get("metadata") or {}
        uid = str(metadata.get("uid") or metadata.get("name") or "")
        kept = {"name": metadata.get("name"), "uid": metadata.get("uid")}
        if metadata.get("deletionTimestamp"):
            kept["deletionTimestamp"] = metadata["deletionTimestamp"]
        self.pods[uid] = {"metadata": kept, "status": pod.get("status") or {}}

    def gone(self, present: Iterable[Mapping[str, Any]]) -> list[Mapping[str, Any]]:
        """The pods recorded that are not among ``present`` (a LIST made at the job's end), by uid: taken away
        and already deleted. Oldest deletion first."""
        uids = {str((pod.get("metadata") or {}).get("uid") or "") for pod in present}
        found = [pod for uid, pod in self.pods.items() if uid not in uids]
        return sorted(found, key=lambda pod: str(pod["metadata"].get("deletionTimestamp") or ""))

    def as_dict(self) -> dict[str, Any]:
        """JSON-safe, for an event's payload."""
        return {"pods": self.pods}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any] | None) -> TakenAway:
        pods = (data or {}).get("pods")
        return cls(pods if isinstance(pods, Mapping) else None)


__all__ = ["DELETION_STARTED", "LOST_POD_REASONS", "TakenAway", "pod_disruption", "taken_away"]

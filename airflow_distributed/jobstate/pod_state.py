"""One pod read: its containers' states, why it waits, the image it cannot pull, which replica's exit decided the
job, and its replica's status row (pure: the API server's JSON in, values out). Whether the cluster took it away is
``disruption``'s to say.

What a pod's state means for its job (the rules of success and failure) is ``job_watch``'s to say.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from airflow_distributed.jobstate.outcome import Ending
from airflow_distributed.jobstate.verdicts import JobVerdict, ReplicaSlot
from airflow_distributed.manifests.pod_names import MAIN_CONTAINER, READINESS_CONTAINER, RESTARTS_ANNOTATION
from airflow_distributed.status import ReplicaState, ReplicaStatus, StrEnum

# Waiting reasons that no amount of waiting fixes: fail at once instead of at the end of startup_timeout, whatever
# the grace. The kubelet never retries an image reference it cannot parse, nor a pull that imagePullPolicy Never
# forbids. CreateContainerConfigError is not among them: it means a Secret/ConfigMap (or key) the pod refers to
# is missing, and the kubelet starts the container as soon as it appears (another task may be creating it), so it
# is judged by startup_timeout like a pod that cannot be scheduled.
PERMANENT_WAITING_REASONS = frozenset({"InvalidImageName", "ErrImageNeverPull"})
# A pull that failed: the kubelet retries with back-off, and a registry that flaps may serve the next pull, but a
# missing tag or a refused credential never recovers. Fail at once unless the operator grants a grace period.
PULL_FAILURE_REASONS = frozenset({"ErrImagePull", "ImagePullBackOff"})
# Waiting reasons that only say "starting", not why a pod is stuck.
_STARTING_REASONS = frozenset({"ContainerCreating", "PodInitializing"})

class ContainerState(StrEnum):
    """Kubernetes' state of a container (the key of its ``state``): its words, not a replica's (``ReplicaState``)."""

    WAITING = "waiting"
    RUNNING = "running"
    TERMINATED = "terminated"


def container_status(pod: Mapping[str, Any], name: str) -> Mapping[str, Any] | None:
    status = pod.get("status") or {}
    for entry in (status.get("containerStatuses") or []) + (status.get("initContainerStatuses") or []):
        if entry.get("name") == name:
            return entry
    return None


def container_state(pod: Mapping[str, Any], name: str) -> tuple[ContainerState | None, Mapping[str, Any]]:
    """(``running`` | ``terminated`` | ``waiting`` | ``None``, the state's fields) of one container."""
    entry = container_status(pod, name) or {}
    state = entry.get("state") or {}
    for key in (ContainerState.TERMINATED, ContainerState.RUNNING, ContainerState.WAITING):
        if state.get(key) is not None:
            return key, state[key]
    return None, {}


def termination_message(pod: Mapping[str, Any], container: str = MAIN_CONTAINER) -> str | None:
    kind, fields = container_state(pod, container)
    return fields.get("message") if kind == ContainerState.TERMINATED else None


def log_available(pod: Mapping[str, Any] | None, container: str = MAIN_CONTAINER) -> bool:
    """The API answers a container's log only once it has started (running or terminated)."""
    return pod is not None and container_state(pod, container)[0] in (ContainerState.RUNNING, ContainerState.TERMINATED)


def pod_started(pod: Mapping[str, Any]) -> bool:
    """Past scheduling and image pulls: some container (the readiness step counts) runs or has run."""
    if (pod.get("status") or {}).get("phase") in ("Running", "Succeeded", "Failed"):
        return True
    status = pod.get("status") or {}
    for entry in (status.get("initContainerStatuses") or []) + (status.get("containerStatuses") or []):
        state = entry.get("state") or {}
        if state.get("running") is not None or state.get("terminated") is not None:
            return True
    return False


def training_started(pod: Mapping[str, Any]) -> bool:
    """Started as ``startup_timeout`` counts it: past the readiness step too. A replica whose step still waits for
    its peers (a master that never listens) has not started, or it would wait out the step's own limit
    (``readiness_timeout_seconds``, minutes) instead of ``startup_timeout``."""
    return container_state(pod, READINESS_CONTAINER)[0] != ContainerState.RUNNING and pod_started(pod)


#: Why a replica not started is waiting, when its readiness step still runs.
READINESS_WAIT = ("WaitingForPeers", f"its readiness step ({READINESS_CONTAINER}) still waits for its peers to accept "
                                     "connections")


def startup_wait(pod: Mapping[str, Any]) -> tuple[str | None, str | None]:
    """Why a replica has not started (``training_started``): its readiness step's wait, else ``waiting_reason``."""
    if container_state(pod, READINESS_CONTAINER)[0] == ContainerState.RUNNING:
        return READINESS_WAIT
    return _waiting(pod)


def _image_problem(pod: Mapping[str, Any]) -> tuple[str, str | None, str] | None:
    """(reason, kubelet's message, image) of a container whose image cannot be pulled, if one is waiting so."""
    status = pod.get("status") or {}
    images = {c.get("name"): c.get("image") for c in ((pod.get("spec") or {}).get("initContainers") or [])
              + ((pod.get("spec") or {}).get("containers") or [])}
    for entry in (status.get("initContainerStatuses") or []) + (status.get("containerStatuses") or []):
        waiting = (entry.get("state") or {}).get("waiting") or {}
        reason = waiting.get("reason")
        if reason in PULL_FAILURE_REASONS or reason in PERMANENT_WAITING_REASONS:
            return reason, waiting.get("message"), images.get(entry.get("name")) or entry.get("image") or "?"
    return None


def image_failure(pods: Iterable[tuple[str, Mapping[str, Any] | None]], pull_failures: dict[str, float],
                  grace: float, now: float) -> JobVerdict | None:
    """The first replica whose image can never be pulled, or whose pull has failed for ``grace`` seconds or more.

    The one pull-failure verdict of every backend (the ``kubernetes`` tracker's, the ``kubeflow`` wait's).

    :param pods: (replica, its pod or ``None``), in the order replicas are named in a verdict.
    :param pull_failures: when each replica's pull was first seen failing, on the caller's clock; kept up to date
        here (a replica whose pull is no longer failing is forgotten).
    """
    pods = list(pods)
    failing = {}
    for name, pod in pods:
        problem = None if pod is None or pod_started(pod) else _image_problem(pod)
        if problem is not None:
            failing[name] = problem
    for name in list(pull_failures):
        if name not in failing:
            del pull_failures[name]
    for name, _ in pods:
        if name not in failing:
            continue
        reason, message, image = failing[name]
        since = pull_failures.setdefault(name, now)
        if reason in PERMANENT_WAITING_REASONS or now - since >= grace:
            return JobVerdict(ReplicaState.FAILED, name, Ending.IMAGE, None, reason, message, image=image)
    return None


def pod_essentials(pod: Mapping[str, Any]) -> dict[str, Any]:
    """What a verdict and the table read of a pod: its name, node, containers' names and images, and status.

    A pod of a big job is tens of KB of JSON, most of it its spec (every replica's address in the environment);
    a waiter holding many jobs (one triggerer, a thousand deferred jobs) keeps this instead.
    """
    metadata, spec = pod.get("metadata") or {}, pod.get("spec") or {}
    kept: dict[str, Any] = {"metadata": {"name": metadata.get("name"), "uid": metadata.get("uid")}, "spec": {}}
    if metadata.get("deletionTimestamp"):  # a pod being deleted or evicted was taken away (``pod_disruption``)
        kept["metadata"]["deletionTimestamp"] = metadata["deletionTimestamp"]
    if spec.get("nodeName"):
        kept["spec"]["nodeName"] = spec["nodeName"]
    for key in ("initContainers", "containers"):
        if spec.get(key):
            kept["spec"][key] = [_container_essentials(c) for c in spec[key]]
    if pod.get("status") is not None:
        kept["status"] = pod["status"]
    return kept


def _container_essentials(container: Mapping[str, Any]) -> dict[str, Any]:
    kept = {"name": container.get("name"), "image": container.get("image")}
    requests = (container.get("resources") or {}).get("requests")
    if requests:  # what an unschedulable replica asked (``_asked``)
        kept["resources"] = {"requests": dict(requests)}
    return kept


def _asked(pod: Mapping[str, Any]) -> str | None:
    """What the replica's own container asks of a node (``cpu 4, memory 16Gi``): the scheduler says which resource
    no node has enough of, not how much was asked; the readiness and sidecar containers' small requests are not the
    user's."""
    for container in (pod.get("spec") or {}).get("containers") or []:
        if container.get("name") == MAIN_CONTAINER:
            requests = (container.get("resources") or {}).get("requests") or {}
            return ", ".join(f"{name} {quantity}" for name, quantity in sorted(requests.items())) or None
    return None


def _waiting(pod: Mapping[str, Any]) -> tuple[str | None, str | None]:
    """Why a pod is not running yet: a container's waiting reason, else the scheduler's, else the pod's."""
    status = pod.get("status") or {}
    for entry in (status.get("initContainerStatuses") or []) + (status.get("containerStatuses") or []):
        waiting = (entry.get("state") or {}).get("waiting") or {}
        if waiting.get("reason") and waiting["reason"] not in _STARTING_REASONS:
            return waiting["reason"], waiting.get("message")
    for condition in status.get("conditions") or []:
        if condition.get("type") == "PodScheduled" and condition.get("status") == "False":
            asked = _asked(pod)
            message = condition.get("message")
            if asked:
                message = f"{message} (the replica asks {asked})" if message else f"the replica asks {asked}"
            return condition.get("reason") or "Unschedulable", message
    if status.get("reason"):
        return status["reason"], status.get("message")
    return None, None


def waiting_reason(pod: Mapping[str, Any]) -> tuple[str | None, str | None]:
    """Why a pod is not running yet (``_waiting``), for waiters outside this module."""
    return _waiting(pod)


def pod_queued(pod: Mapping[str, Any]) -> bool:
    """Not started and not scheduled to a node: waiting for capacity (unschedulable, gated by Kueue)."""
    return not pod_started(pod) and not _scheduled(pod)


def may_have_started(pod: Mapping[str, Any] | None) -> bool:
    """Bound to a node, its main container not yet seen running or ended, and nothing known to hold it back (no
    image, configuration or scheduling problem): a real kubelet reports a container's start, and its end, a moment
    late (its pod lifecycle relist, then its status sync), so a short replica can have run and ended while its pod
    still reads pending."""
    return (pod is not None and _scheduled(pod) and _waiting(pod)[0] is None
            and container_state(pod, MAIN_CONTAINER)[0] not in (ContainerState.RUNNING, ContainerState.TERMINATED))


def _scheduled(pod: Mapping[str, Any]) -> bool:
    """The pod is bound to a node, and the scheduler does not say otherwise."""
    conditions = (pod.get("status") or {}).get("conditions") or []
    if any(c.get("type") == "PodScheduled" and c.get("status") == "False" for c in conditions):
        return False
    return bool((pod.get("spec") or {}).get("nodeName"))


def container_exit(pod: Mapping[str, Any]) -> tuple[str, Mapping[str, Any]] | None:
    """(container, terminated state) of the container whose exit decides this replica, if one has exited."""
    kind, fields = container_state(pod, READINESS_CONTAINER)
    if kind == ContainerState.TERMINATED and fields.get("exitCode") not in (None, 0):
        return READINESS_CONTAINER, fields
    kind, fields = container_state(pod, MAIN_CONTAINER)
    if kind == ContainerState.TERMINATED:
        return MAIN_CONTAINER, fields
    return None


@dataclass(frozen=True)
class ReplicaExit:
    """A replica whose container exited non-zero: which container, its ``terminated`` state, and how the cluster
    was taking its pod away, if it was (``pod_disruption``)."""

    replica: str
    container: str
    state: Mapping[str, Any]
    disruption: str | None = None


def deciding_exit(exits: Iterable[ReplicaExit]) -> ReplicaExit | None:
    """Of the replicas that exited non-zero, the one whose end decided the job (every backend's rule): the first to
    exit, since its peers fail moments later when they lose it; of those that exited within the same second (the
    resolution of ``finishedAt``), one the cluster took away."""
    return min(exits, key=lambda found: (str(found.state.get("finishedAt") or ""), found.disruption is None),
               default=None)


def recreated(pod: Mapping[str, Any]) -> int:
    """How often the task recreated this replica's pod (an elastic job's lost replica), from its annotation."""
    value = ((pod.get("metadata") or {}).get("annotations") or {}).get(RESTARTS_ANNOTATION, "0")
    return int(value) if str(value).isdigit() else 0


def replica_status(slot: ReplicaSlot, pod: Mapping[str, Any] | None, *, deleted: bool = False) -> ReplicaStatus:
    """A slot's row of the table, from its pod (``None``: not created yet)."""
    if pod is None:
        return ReplicaStatus(slot.name, slot.role, slot.index,
                             ReplicaState.STOPPED if deleted else ReplicaState.PENDING)
    where = (pod.get("spec") or {}).get("nodeName") or ""
    entry = container_status(pod, MAIN_CONTAINER) or {}
    restarts = int(entry.get("restartCount") or 0) + recreated(pod)
    exited = container_exit(pod)
    if exited is not None:
        _, fields = exited
        code = fields.get("exitCode")
        state = ReplicaState.SUCCEEDED if code == 0 else ReplicaState.FAILED
        reason = fields.get("reason") if code != 0 else None
        return ReplicaStatus(slot.name, slot.role, slot.index, state, code, where, restarts, reason)
    if deleted:
        return ReplicaStatus(slot.name, slot.role, slot.index, ReplicaState.STOPPED, None, where, restarts)
    phase = (pod.get("status") or {}).get("phase")
    if phase == "Failed":
        reason, _ = _waiting(pod)
        return ReplicaStatus(slot.name, slot.role, slot.index, ReplicaState.FAILED, None, where, restarts, reason)
    if container_state(pod, MAIN_CONTAINER)[0] == ContainerState.RUNNING:
        return ReplicaStatus(slot.name, slot.role, slot.index, ReplicaState.RUNNING, None, where, restarts)
    reason, _ = _waiting(pod)
    return ReplicaStatus(slot.name, slot.role, slot.index, ReplicaState.PENDING, None, where, restarts, reason)

"""Pod status as a kubelet reports it, built for the phase a test moves a pod to.

``pod_status`` derives container statuses and the standard pod conditions (PodScheduled,
PodReadyToStartContainers, Initialized, ContainersReady, Ready) from a phase, keeping
``lastTransitionTime`` of conditions whose status did not change, as the kubelet does.
"""

from __future__ import annotations

import copy
import hashlib
from typing import Any

PHASES = ("Pending", "Running", "Succeeded", "Failed")

_PENDING_MESSAGES = {
    "Unschedulable": "0/1 nodes are available: 1 Insufficient cpu. preemption: 0/1 nodes are available: "
                     "1 No preemption victims found for incoming pod.",
    "ErrImagePull": 'failed to pull and unpack image "{image}": failed to resolve reference "{image}": not found',
    "ImagePullBackOff": 'Back-off pulling image "{image}"',
    "ContainerCreating": "",
    "CreateContainerConfigError": 'secret "missing" not found',
    "CrashLoopBackOff": "back-off 10s restarting failed container={name} pod={pod}",
}


def _container_id(pod_uid: str, name: str) -> str:
    return "containerd://" + hashlib.sha256(f"{pod_uid}/{name}".encode()).hexdigest()


def _image_id(image: str) -> str:
    repo = image.split("@")[0].rsplit(":", 1)[0] if ":" in image.rsplit("/", 1)[-1] else image.split("@")[0]
    if "/" not in repo:
        repo = f"docker.io/library/{repo}"
    return f"{repo}@sha256:{hashlib.sha256(image.encode()).hexdigest()}"


def default_state(phase: str, now: str, started_at: str | None) -> dict:
    if phase == "Pending":
        return {"waiting": {"reason": "ContainerCreating"}}
    if phase == "Running":
        return {"running": {"startedAt": started_at or now}}
    exit_code, reason = (0, "Completed") if phase == "Succeeded" else (1, "Error")
    return {"terminated": {"exitCode": exit_code, "reason": reason, "startedAt": started_at or now, "finishedAt": now}}


def pending_message(reason: str, image: str = "", name: str = "", pod: str = "") -> str:
    template = _PENDING_MESSAGES.get(reason, "")
    return template.format(image=image, name=name, pod=pod)


def _started_at(previous: dict | None) -> str | None:
    state = (previous or {}).get("state") or {}
    return (state.get("running") or state.get("terminated") or {}).get("startedAt")


def _condition(conditions: dict, ctype: str, status: str, now: str, reason: str | None = None,
               message: str | None = None) -> dict:
    previous = conditions.get(ctype)
    moment = previous["lastTransitionTime"] if previous and previous.get("status") == status else now
    cond: dict[str, Any] = {"type": ctype, "status": status, "lastProbeTime": None, "lastTransitionTime": moment}
    if reason:
        cond["reason"] = reason
    if message:
        cond["message"] = message
    return cond


def pod_status(pod: dict, phase: str, *, now: str, pod_ip: str, host_ip: str,
               container_states: dict[str, dict] | None = None, reason: str | None = None,
               message: str | None = None, conditions: list[dict] | None = None,
               unschedulable: bool = False) -> dict:
    if phase not in PHASES:
        raise ValueError(f"phase must be one of {PHASES}, not {phase!r}")
    spec = pod.get("spec") or {}
    old = pod.get("status") or {}
    old_conditions = {c["type"]: c for c in old.get("conditions") or []}
    container_states = container_states or {}
    uid = pod["metadata"]["uid"]
    status: dict[str, Any] = {"phase": phase}
    if "qosClass" in old:
        status["qosClass"] = old["qosClass"]

    if unschedulable:
        status["conditions"] = [_condition(old_conditions, "PodScheduled", "False", now, "Unschedulable",
                                           message)]
        return _overlay_conditions(status, conditions, now)

    previous = {c["name"]: c for c in (old.get("containerStatuses") or []) + (old.get("initContainerStatuses") or [])}

    def build(container: dict, state: dict) -> dict:
        name = container["name"]
        started = "running" in state or "terminated" in state
        entry: dict[str, Any] = {
            "name": name, "image": container.get("image", ""),
            "imageID": _image_id(container.get("image", "")) if started else "",
            "ready": "running" in state, "restartCount": (previous.get(name) or {}).get("restartCount", 0),
            "started": "running" in state, "state": copy.deepcopy(state),
            "lastState": copy.deepcopy((previous.get(name) or {}).get("lastState") or {}),
        }
        if started:
            entry["containerID"] = _container_id(uid, name)
            if "terminated" in entry["state"]:
                entry["state"]["terminated"].setdefault("containerID", entry["containerID"])
        return entry

    statuses = []
    all_running = True
    for container in spec.get("containers") or []:
        state = container_states.get(container["name"]) or default_state(
            phase, now, _started_at(previous.get(container["name"])))
        all_running = all_running and "running" in state
        statuses.append(build(container, state))
    init_statuses = []
    for container in spec.get("initContainers") or []:
        if container["name"] in container_states:
            state = container_states[container["name"]]
        elif phase == "Pending":
            state = {"waiting": {"reason": "PodInitializing"}}
        else:
            started = _started_at(previous.get(container["name"])) or now
            state = {"terminated": {"exitCode": 0, "reason": "Completed", "startedAt": started, "finishedAt": started}}
        init_statuses.append(build(container, state))
    status["containerStatuses"] = statuses
    if init_statuses:
        status["initContainerStatuses"] = init_statuses

    started_any = phase != "Pending" or any("running" in s["state"] or "terminated" in s["state"] for s in statuses)
    status["hostIP"] = host_ip
    status["hostIPs"] = [{"ip": host_ip}]
    if phase != "Pending" or started_any:
        status["podIP"] = pod_ip
        status["podIPs"] = [{"ip": pod_ip}]
    status["startTime"] = old.get("startTime") or now
    if reason:
        status["reason"] = reason
    if message:
        status["message"] = message

    done = phase in ("Succeeded", "Failed")
    done_reason = "PodCompleted" if phase == "Succeeded" else ("PodFailed" if phase == "Failed" else None)
    inits_done = all("terminated" in s["state"] and s["state"]["terminated"].get("exitCode") == 0
                     for s in init_statuses)
    ready = phase == "Running" and all_running
    not_ready_reason = done_reason or "ContainersNotReady"
    not_ready_names = [s["name"] for s in statuses if not s["ready"]]
    not_ready_message = None if done else f"containers with unready status: [{' '.join(not_ready_names)}]"
    status["conditions"] = [
        _condition(old_conditions, "PodReadyToStartContainers",
                   "True" if not done and (phase != "Pending" or started_any) else "False", now),
        _condition(old_conditions, "Initialized", "True" if inits_done else "False", now,
                   done_reason if done and inits_done else (None if inits_done else "ContainersNotInitialized")),
        _condition(old_conditions, "Ready", "True" if ready else "False", now,
                   None if ready else not_ready_reason, None if ready else not_ready_message),
        _condition(old_conditions, "ContainersReady", "True" if ready else "False", now,
                   None if ready else not_ready_reason, None if ready else not_ready_message),
        _condition(old_conditions, "PodScheduled", "True", now),
    ]
    return _overlay_conditions(status, conditions, now)


def _overlay_conditions(status: dict, conditions: list[dict] | None, now: str) -> dict:
    if not conditions:
        return status
    merged = {c["type"]: c for c in status.get("conditions") or []}
    for cond in conditions:
        entry = {"lastProbeTime": None, "lastTransitionTime": now, **cond}
        merged[cond["type"]] = entry
    status["conditions"] = list(merged.values())
    return status

"""What a job cost: requested CPU-seconds, memory GiB-seconds and GPU-seconds per replica and in total (pure).

A replica's cost is what it asked for times how long it ran, over every run it had: the first, each one an elastic
job started again, and those of earlier tries (``add_usage``). The requests come from the plan (local backend) or
the pod's own containers (Kubernetes), the running time from the processes' or the pods' start and end times. The
result is the ``usage`` key of the ``job`` XCom, the job view and the OpenLineage run facet (docs/outputs.md,
"What a job cost"); every figure is a finite number, rounded to the millisecond.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from airflow_distributed.spec.quantities import QuantityError, amount_in_base_units

GIB = 2**30
#: A job with more replicas than this lists the first ones only; the totals count every one.
USAGE_REPLICAS = 256
#: The figures a replica and the job total carry, beside ``running_seconds``: ``process_seconds`` counts each of a
#: replica's training processes (``n_proc_per_node``), where ``running_seconds`` counts the replica once.
FIGURES = ("cpu_seconds", "memory_gib_seconds", "gpu_seconds", "process_seconds")
#: torch's launcher variable for the processes of a node: the plan sets it (``frameworks.pytorch``), a training
#: operator sets it from the job's ``nprocPerNode`` or ``numProcPerNode``; what a pod says of its processes.
PROCESSES_ENV = "PET_NPROC_PER_NODE"


@dataclass(frozen=True)
class Requests:
    """What one replica asked for: cores, GiB of memory, GPUs."""

    cpu: float = 0.0
    memory_gib: float = 0.0
    gpu: float = 0.0


@dataclass(frozen=True)
class ReplicaRun:
    """One run of one replica: from ``started`` to ``ended`` (epoch seconds); ``started`` None: it never ran;
    ``processes``: the training processes it ran."""

    name: str
    requests: Requests
    started: float | None
    ended: float | None
    processes: int = 1


def plan_requests(resources: Any) -> Requests:
    """A plan's ``Resources`` (or None) as ``Requests``: the request, else the limit (Kubernetes sets the request to
    the limit when only a limit is given); GPUs as ``device_count`` counts them."""
    if resources is None:
        return Requests()

    def amount(kind: str) -> float:
        value = getattr(resources, kind, None)
        given = None if value is None else (value.requests if value.requests is not None else value.limits)
        return 0.0 if given is None else float(amount_in_base_units(kind, given))

    return Requests(amount("cpu"), amount("memory") / GIB, float(resources.device_count("gpu")))


def pod_requests(pod: Mapping[str, Any]) -> Requests:
    """The requests of a pod's containers added up (a resource given as a limit only counts its limit); GPUs are
    the extended resources named ``.../gpu`` (``nvidia.com/gpu``, ``amd.com/gpu``)."""
    cpu = memory = gpu = 0.0
    for container in (pod.get("spec") or {}).get("containers") or []:
        resources = container.get("resources") or {} if isinstance(container, Mapping) else {}
        amounts = {**(resources.get("limits") or {}), **(resources.get("requests") or {})}
        for key, value in amounts.items():
            try:
                if key == "cpu":
                    cpu += float(amount_in_base_units("cpu", value))
                elif key == "memory":
                    memory += float(amount_in_base_units("memory", value)) / GIB
                elif str(key).endswith("/gpu"):
                    gpu += float(amount_in_base_units("gpu", value))
            except (QuantityError, TypeError, ValueError):
                continue  # the API server has validated them; a stranger value costs nothing here
    return Requests(cpu, memory, gpu)


def pod_processes(pod: Mapping[str, Any]) -> int:
    """The training processes a replica's pod runs: ``PROCESSES_ENV`` of its container that sets it, else one (a
    framework that runs one process per replica sets none)."""
    for container in (pod.get("spec") or {}).get("containers") or []:
        for entry in (container.get("env") or []) if isinstance(container, Mapping) else []:
            value = entry.get("value") if isinstance(entry, Mapping) else None
            if entry.get("name") == PROCESSES_ENV and isinstance(value, str) and value.isdigit() and int(value) > 0:
                return int(value)
    return 1


def pod_run(name: str, pod: Mapping[str, Any] | None, now: float) -> ReplicaRun:
    """A replica's run from its pod: from ``status.startTime`` (else the first container start) to the last
    container's ``finishedAt`` once every container has ended, else to ``now`` (it was still running)."""
    if pod is None:
        return ReplicaRun(name, Requests(), None, None)
    status = pod.get("status") or {}
    statuses = [s for s in status.get("containerStatuses") or [] if isinstance(s, Mapping)]
    states = [s.get("state") or {} for s in statuses]
    starts = [_epoch((st.get("running") or st.get("terminated") or {}).get("startedAt")) for st in states]
    started = _epoch(status.get("startTime")) or min((s for s in starts if s is not None), default=None)
    ends = [_epoch((st.get("terminated") or {}).get("finishedAt")) for st in states]
    if statuses and all(end is not None for end in ends):
        ended: float | None = max(end for end in ends if end is not None)
    else:
        ended = now if started is not None else None
    return ReplicaRun(name, pod_requests(pod), started, ended, pod_processes(pod))


def _epoch(stamp: Any) -> float | None:
    if not isinstance(stamp, str) or not stamp:
        return None
    try:
        return datetime.fromisoformat(stamp.replace("Z", "+00:00")).timestamp()
    except ValueError:
        return None


def job_usage(runs: Iterable[ReplicaRun], wall_seconds: float) -> dict[str, Any]:
    """``{"wall_seconds", "tries": 1, "running_seconds", "cpu_seconds", "memory_gib_seconds", "gpu_seconds",
    "process_seconds", "replicas": {name: {"runs", "cpu", "memory_gib", "gpu", "processes", "running_seconds",
    <figures>}}}`` for one try. A replica's ``gpu`` is every GPU it asked for, whichever of its processes uses it."""
    replicas: dict[str, dict[str, Any]] = {}
    for run in runs:
        seconds = max(0.0, run.ended - run.started) if run.started is not None and run.ended is not None else 0.0
        row = replicas.setdefault(run.name, {"runs": 0, "cpu": run.requests.cpu, "memory_gib": run.requests.memory_gib,
                                             "gpu": run.requests.gpu, "processes": run.processes,
                                             "running_seconds": 0.0,
                                             **{figure: 0.0 for figure in FIGURES}})
        row["runs"] += 1 if run.started is not None else 0
        row["running_seconds"] += seconds
        row["cpu_seconds"] += run.requests.cpu * seconds
        row["memory_gib_seconds"] += run.requests.memory_gib * seconds
        row["gpu_seconds"] += run.requests.gpu * seconds
        row["process_seconds"] += run.processes * seconds
    usage = {"wall_seconds": _number(wall_seconds), "tries": 1, "replicas": replicas}
    return _totals(usage)


def usage_so_far(pods: Iterable[tuple[str, Mapping[str, Any] | None]], now: float) -> dict[str, Any]:
    """The usage of a running try from its replicas' pods, as the job view shows it: each replica up to ``now`` if it
    still runs, the wall time from the first pod's creation (this try only: earlier tries are added when it ends)."""
    pods = list(pods)
    created = [_epoch(((pod or {}).get("metadata") or {}).get("creationTimestamp")) for _, pod in pods]
    first = min((stamp for stamp in created if stamp is not None), default=None)
    return job_usage([pod_run(name, pod, now) for name, pod in pods], now - first if first is not None else 0.0)


def add_usage(earlier: Mapping[str, Any] | None, current: Mapping[str, Any]) -> dict[str, Any]:
    """``current`` with the usage of earlier tries added (``earlier`` as an earlier ``job_usage`` or ``add_usage``
    gave it; anything else counts for nothing): every figure summed, ``tries`` counted, per replica too."""
    if not isinstance(earlier, Mapping) or not isinstance(earlier.get("replicas"), Mapping):
        return _totals(dict(current))
    replicas: dict[str, dict[str, Any]] = {name: dict(row) for name, row in earlier["replicas"].items()
                                           if isinstance(row, Mapping)}
    for name, row in (current.get("replicas") or {}).items():
        before = replicas.get(name, {})
        replicas[name] = {**row, **{key: _number(before.get(key)) + _number(row.get(key))
                                    for key in ("running_seconds", *FIGURES)},
                          "runs": int(_number(before.get("runs"))) + int(_number(row.get("runs")))}
    usage = {"wall_seconds": _number(earlier.get("wall_seconds")) + _number(current.get("wall_seconds")),
             "tries": int(_number(earlier.get("tries"))) + int(_number(current.get("tries")) or 1),
             "replicas": replicas}
    return _totals(usage)


def _totals(usage: dict[str, Any]) -> dict[str, Any]:
    """The totals over every replica, every figure rounded; at most ``USAGE_REPLICAS`` replicas listed."""
    replicas = usage.get("replicas") or {}
    rows = {name: {key: (_round(value) if isinstance(value, float) else value) for key, value in row.items()}
            for name, row in replicas.items()}
    totals = {key: _round(sum(_number(row.get(key)) for row in replicas.values()))
              for key in ("running_seconds", *FIGURES)}
    listed = dict(list(rows.items())[:USAGE_REPLICAS])
    return {"wall_seconds": _round(_number(usage.get("wall_seconds"))), "tries": int(usage.get("tries") or 1),
            **totals, "replicas": listed, **({"replicas_left_out": len(rows) - len(listed)}
                                              if len(rows) > len(listed) else {})}


def _number(value: Any) -> float:
    """A finite number, else 0 (a stored value someone changed by hand must not break the sum)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        return 0.0
    return float(value)


def _round(value: float) -> float:
    return round(value, 3) if math.isfinite(value) else 0.0


__all__ = ["FIGURES", "PROCESSES_ENV", "USAGE_REPLICAS", "ReplicaRun", "Requests", "add_usage", "job_usage",
           "plan_requests", "pod_processes", "pod_requests", "pod_run", "usage_so_far"]

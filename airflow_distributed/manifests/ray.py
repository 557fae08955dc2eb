"""``backend="ray"``: the Ray Job that runs a training job, and the driver's reports read back from its log (pure).

The task submits one Ray Job whose entrypoint is the driver (``hooks.ray_driver``), started with the cluster's
Python. The job's description travels in one variable of the job's ``runtime_env``: the spec, the command, the
variables and folders of the replica contract; the driver expands it into a plan (``plan.build_plan``) once its
actors have told it where each replica runs. The driver writes what it knows as marked lines of its log, the only
channel the Jobs API gives back, and ``last_report`` reads the latest one.
"""

from __future__ import annotations

import json
import posixpath
import shlex
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from airflow_distributed.plan import Layout, SpecReplica, expand_replicas
from airflow_distributed.spec.models import TrainingSpec
from airflow_distributed.spec.quantities import amount_in_base_units

#: The variable of the job's ``runtime_env`` that carries its description to the driver.
JOB_VARIABLE = "AIRFLOW_DISTRIBUTED_RAY_JOB"
#: The module the entrypoint runs.
DRIVER_MODULE = "airflow_distributed.hooks.ray_driver"
#: How a line of the driver's log that reports to the task starts; a JSON object follows.
REPORT_MARK = "AIRFLOW_DISTRIBUTED_RAY_REPORT "
#: Where the replicas' work folders are on every node, unless the job says otherwise.
DEFAULT_WORK_ROOT = "/tmp/airflow-distributed-ray"
#: Placement strategies the driver may ask for: ``PACK`` (default) fills nodes first, ``SPREAD`` spreads what it
#: can, the ``STRICT_`` ones refuse to start otherwise.
STRATEGIES = ("PACK", "SPREAD", "STRICT_PACK", "STRICT_SPREAD")
#: A replica whose spec names no cpu reserves one core.
DEFAULT_CPU = 1.0


@dataclass(frozen=True)
class ActorAddressing:
    """Replicas on Ray actors: the node address and the free port each actor reported, in plan order."""

    endpoints: Sequence[tuple[str, int]]

    def endpoint(self, ordinal: int, job: str, name: str, default_port: int) -> tuple[str, int]:
        host, port = self.endpoints[ordinal]
        return host, port


def bundle(slot: SpecReplica) -> dict[str, float]:
    """The placement-group bundle of one replica: its cpu (limit, else request; one core by default), memory in
    bytes and GPUs, as Ray names them."""
    resources = slot.settings.resources
    cpu = resources.cpu_limit() if resources is not None else None
    reserved: dict[str, float] = {"CPU": float(cpu) if cpu else DEFAULT_CPU}
    if resources is not None and resources.memory is not None:
        memory = resources.memory.limits if resources.memory.limits is not None else resources.memory.requests
        if memory is not None:
            reserved["memory"] = float(int(amount_in_base_units("memory", memory)))
    gpus = resources.device_count("gpu") if resources is not None else 0
    if gpus:
        reserved["GPU"] = float(gpus)
    return reserved


def bundles(spec: TrainingSpec) -> list[dict[str, float]]:
    """One bundle per replica, in plan order (master first)."""
    return [bundle(slot) for slot in expand_replicas(spec)]


def job_layout(work_root: str, job_name: str, model_dir: str, checkpoint_dir: str) -> Layout:
    """The same paths on every node: each actor writes the job's files into its own node's copy of the work folder;
    the model and checkpoint folders are the user's (shared storage on a cluster of several nodes)."""
    work_dir = posixpath.join(work_root, "jobs", job_name)
    return Layout(model_dir=model_dir, output_path=posixpath.join(work_dir, "output.json"),
                  files_dir=posixpath.join(work_dir, "files"), checkpoint_dir=checkpoint_dir)


def job_description(
    *,
    spec: TrainingSpec,
    job_name: str,
    command: Sequence[str],
    layout: Layout,
    files: Mapping[str, str],
    env: Mapping[str, str] | None,
    try_number: int,
    strategy: str = "PACK",
    startup_timeout: float = 600.0,
    settle_period: float = 5.0,
    stop_grace_period: float = 5.0,
    poll_interval: float = 0.5,
    keep_checkpoints: bool = False,
) -> dict[str, Any]:
    """Everything the driver needs, JSON-safe.

    :param keep_checkpoints: keep the checkpoint files after the job succeeds (else the master's actor removes
        them, as the local backend does).
    """
    if strategy not in STRATEGIES:
        raise ValueError(f"placement strategy {strategy!r} is not one of {', '.join(STRATEGIES)}")
    return {
        "job_name": job_name,
        "spec": spec.model_dump(mode="json", exclude_none=True, by_alias=True),
        "command": list(command),
        "layout": {"model_dir": layout.model_dir, "output_path": layout.output_path, "files_dir": layout.files_dir,
                   "checkpoint_dir": layout.checkpoint_dir},
        "files": dict(files),
        "env": dict(env or {}),
        "try_number": try_number,
        "bundles": bundles(spec),
        "strategy": strategy,
        "startup_timeout": startup_timeout,
        "settle_period": settle_period,
        "stop_grace_period": stop_grace_period,
        "poll_interval": poll_interval,
        "keep_checkpoints": keep_checkpoints,
    }


def ray_job(description: Mapping[str, Any], interpreter: str) -> tuple[str, dict[str, Any]]:
    """``(entrypoint, runtime_env)`` of the Ray Job: ``interpreter`` (the cluster's Python: the entrypoint runs
    with the cluster's PATH, so it is named) runs the driver with the description in ``JOB_VARIABLE``."""
    entrypoint = shlex.join([interpreter, "-m", DRIVER_MODULE])
    return entrypoint, {"env_vars": {JOB_VARIABLE: json.dumps(description, separators=(",", ":"))}}


def report_line(report: Mapping[str, Any]) -> str:
    """One report of the driver as a line of its log."""
    return REPORT_MARK + json.dumps(report, separators=(",", ":"))


def last_report(logs: str, kind: str | None = None) -> dict[str, Any] | None:
    """The latest report in the driver's log (of ``kind`` when given: ``replicas`` or ``outcome``), or ``None``.
    A line that does not parse (cut off, or a replica printing the mark) is skipped."""
    for line in reversed(logs.splitlines()):
        start = line.find(REPORT_MARK)
        if start < 0:
            continue
        try:
            report = json.loads(line[start + len(REPORT_MARK):])
        except json.JSONDecodeError:
            continue
        if isinstance(report, dict) and (kind is None or report.get("kind") == kind):
            return report
    return None


__all__ = ["DEFAULT_WORK_ROOT", "DRIVER_MODULE", "JOB_VARIABLE", "REPORT_MARK", "STRATEGIES", "ActorAddressing",
           "bundle", "bundles", "job_description", "job_layout", "last_report", "ray_job", "report_line"]

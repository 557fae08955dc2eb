"""``backend="ray"``: the Ray Job that runs a training job, and the driver's reports read back from its log (pure).

The task submits one Ray Job whose entrypoint is the driver (``replica.ray_driver``), started with the cluster's
Python. The job's description travels in one variable of the job's ``runtime_env``: the spec, the command, the
variables and folders of the replica contract; the driver expands it into a plan (``plan.build_plan``) once its
actors have told it where each replica runs. The driver writes what it knows as marked lines of its log, the only
channel the Jobs API gives back, and ``last_report`` reads the latest one.
"""

from __future__ import annotations

import json
import math
import posixpath
import shlex
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, fields
from typing import Any

from airflow_distributed.jobstate.startup import ACTOR_UNKNOWN, actor_startup, job_startup
from airflow_distributed.launch import Launch
from airflow_distributed.plan import Layout, SpecReplica, expand_replicas
from airflow_distributed.spec.models import TrainingSpec
from airflow_distributed.spec.quantities import amount_in_base_units

#: How the ray backend starts replicas (``plan.build_plan``'s ``launch``, in its driver): processes of Ray actors,
#: the plan sets every variable.
RAY_LAUNCH = Launch()
#: The variable of the job's ``runtime_env`` that carries its description to the driver.
JOB_VARIABLE = "AIRFLOW_DISTRIBUTED_RAY_JOB"
#: The module the entrypoint runs.
DRIVER_MODULE = "airflow_distributed.replica.ray_driver"
#: How a line of the driver's log that reports to the task starts; a JSON object follows.
REPORT_MARK = "AIRFLOW_DISTRIBUTED_RAY_REPORT "
#: Where the replicas' work folders are on every node, unless the job says otherwise.
DEFAULT_WORK_ROOT = "/tmp/airflow-distributed-ray"
#: Placement strategies the driver may ask for: ``PACK`` (default) fills nodes first, ``SPREAD`` spreads what it
#: can, the ``STRICT_`` ones refuse to start otherwise (``STRICT_SPREAD``: one node per replica).
STRATEGIES = ("PACK", "SPREAD", "STRICT_PACK", "STRICT_SPREAD")
#: A replica whose spec names no cpu reserves one core.
DEFAULT_CPU = 1.0
#: Seconds the driver goes on without a renewal of its liveness key before it stops the job as abandoned (its task
#: SIGKILLed, its worker lost). Generous: a triggerer restart, or a retry that reattaches, renews it again in time.
DEFAULT_LIVENESS_GRACE = 300.0
#: How a liveness key is named in the cluster's GCS key-value store (the Jobs API's package store, see
#: ``liveness_key``).
LIVENESS_PREFIX = "airflow_distributed_liveness_"
#: Resources of a bundle that come from the spec (``resources``), never from ``ray_options.resources``.
SPEC_RESOURCES = {"CPU": "cpu", "GPU": "gpu", "TPU": "tpu", "memory": "memory"}


@dataclass(frozen=True)
class RayOptions:
    """``ray_options`` of the operator: what only a Ray cluster has.

    :param placement_strategy: how the replicas' bundles are placed: ``PACK`` (default), ``SPREAD``,
        ``STRICT_PACK`` or ``STRICT_SPREAD`` (every replica on a node of its own; the job does not start otherwise).
    :param resources: Ray custom resources (those the nodes were started with, ``ray start --resources``)
        reserved in every replica's bundle, name to amount.
    :param accelerator_type: the accelerator every replica needs (Ray's ``accelerator_type:<type>`` resource, e.g.
        ``A100``), as Ray's own ``accelerator_type=`` option reserves it.
    :param liveness_grace: seconds the job goes on without its task (SIGKILLed, its worker lost) before its driver
        stops it; the waiting task renews its liveness every ``liveness_grace / 5`` seconds (at most every 30 s).
    """

    placement_strategy: str = "PACK"
    resources: Mapping[str, float] | None = None
    accelerator_type: str | None = None
    liveness_grace: float = DEFAULT_LIVENESS_GRACE

    @classmethod
    def of(cls, options: Mapping[str, Any] | None) -> RayOptions:
        """The options of a mapping checked by ``ray_option_problems``."""
        return cls(**dict(options or {}))

    def bundle_resources(self) -> dict[str, float]:
        """The custom resources every bundle reserves."""
        reserved = {name: float(amount) for name, amount in (self.resources or {}).items()}
        if self.accelerator_type:
            # The amount Ray's own accelerator_type= option asks: any node of that type, shared by its bundles.
            reserved[f"accelerator_type:{self.accelerator_type}"] = 0.001
        return reserved


def ray_option_problems(options: Any) -> list[tuple[str, str]]:
    """``(field, why)`` of each problem of ``ray_options``, named ``ray_options.<field>``; values are not echoed."""
    if options is None:
        return []
    known = [field.name for field in fields(RayOptions)]
    if not isinstance(options, Mapping):
        return [("ray_options", f"expected a mapping of {', '.join(known)}, got {type(options).__name__}")]
    problems = [(f"ray_options.{key}", f"is not an option; allowed: {', '.join(known)}")
                for key in options if key not in known]
    strategy = options.get("placement_strategy", "PACK")
    if strategy not in STRATEGIES:
        problems.append(("ray_options.placement_strategy", f"is not allowed: one of {', '.join(STRATEGIES)}"))
    resources = options.get("resources")
    if resources is not None and not isinstance(resources, Mapping):
        problems.append(("ray_options.resources", "expected a mapping of Ray custom resource names to amounts"))
    for name, amount in (resources or {}).items() if isinstance(resources, Mapping) else ():
        where = f"ray_options.resources.{name}"
        if not isinstance(name, str) or not name:
            problems.append(("ray_options.resources", "a resource name must be a non-empty string"))
        elif name in SPEC_RESOURCES:
            problems.append((where, f"comes from the spec: give it as resources.{SPEC_RESOURCES[name]} of the "
                             "replicas"))
        elif name.startswith(("node:", "accelerator_type:")) or "_group_" in name:
            problems.append((where, "is a resource Ray sets itself (node:..., placement groups'); for an "
                             "accelerator give accelerator_type"))
        elif not _positive_number(amount):
            problems.append((where, "is not allowed: an amount, a number > 0"))
    accelerator = options.get("accelerator_type")
    if accelerator is not None and (not isinstance(accelerator, str) or not accelerator or ":" in accelerator):
        problems.append(("ray_options.accelerator_type", "expected the accelerator's name as Ray knows it, e.g. "
                         "'A100'"))
    grace = options.get("liveness_grace", DEFAULT_LIVENESS_GRACE)
    if not _positive_number(grace):
        problems.append(("ray_options.liveness_grace", "is not allowed: seconds, a number > 0"))
    return problems


def _positive_number(value: Any) -> bool:
    """A number > 0 that a float holds (an int too large for one would fail the job, not the parse)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return False
    try:
        return 0 < float(value) < float("inf")
    except OverflowError:
        return False


def renew_interval(grace: float) -> float:
    """Seconds between two renewals of a job's liveness key: several renewals fit in the grace."""
    return min(30.0, grace / 5)


def liveness_key(job_name: str) -> str:
    """Job ``job_name``'s liveness key in the cluster's GCS key-value store: a package URI, as the Jobs API's
    package store names what it stores (``gcs://<name>``, uploaded at ``/api/packages/gcs/<name>``)."""
    return f"gcs://{LIVENESS_PREFIX}{job_name}"


@dataclass(frozen=True)
class ActorAddressing:
    """Replicas on Ray actors: the node address and the free port each actor reported, in plan order."""

    endpoints: Sequence[tuple[str, int]]

    def endpoint(self, ordinal: int, job: str, name: str, default_port: int) -> tuple[str, int]:
        host, port = self.endpoints[ordinal]
        return host, port


def bundle(slot: SpecReplica, custom: Mapping[str, float] | None = None) -> dict[str, float]:
    """The placement-group bundle of one replica: its cpu (limit, else request; one core by default), memory in
    bytes, GPUs and TPUs, as Ray names them, and the ``custom`` resources every replica reserves."""
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
    tpus = resources.device_count("tpu") if resources is not None else 0
    if tpus:
        reserved["TPU"] = float(tpus)
    return {**reserved, **(custom or {})}


def bundles(spec: TrainingSpec, custom: Mapping[str, float] | None = None) -> list[dict[str, float]]:
    """One bundle per replica, in plan order (master first)."""
    return [bundle(slot, custom) for slot in expand_replicas(spec)]


def job_layout(work_root: str, job_name: str, model_dir: str, checkpoint_dir: str) -> Layout:
    """The same paths on every node: each actor writes the job's files into its own node's copy of the work folder;
    the model and checkpoint folders are the user's (shared storage on a cluster of several nodes), and the job's
    TensorBoard folder is ``<model_dir>/tensorboard``, beside the checkpoints' default."""
    work_dir = posixpath.join(work_root, "jobs", job_name)
    return Layout(model_dir=model_dir, output_path=posixpath.join(work_dir, "output.json"),
                  files_dir=posixpath.join(work_dir, "files"), checkpoint_dir=checkpoint_dir,
                  tensorboard_dir=posixpath.join(model_dir, "tensorboard"))


def job_description(
    *,
    spec: TrainingSpec,
    job_name: str,
    command: Sequence[str],
    layout: Layout,
    files: Mapping[str, str],
    env: Mapping[str, str] | None,
    try_number: int,
    options: RayOptions | None = None,
    liveness: bool = True,
    startup_timeout: float = 600.0,
    settle_period: float = 5.0,
    stop_grace_period: float = 5.0,
    poll_interval: float = 0.5,
    keep_checkpoints: bool = False,
    progress_timeout: float | None = None,
) -> dict[str, Any]:
    """Everything the driver needs, JSON-safe.

    :param options: the placement strategy, custom resources and liveness grace (``ray_options``).
    :param liveness: a task waits for the job and renews its liveness key; ``False`` (``wait_for_completion=False``):
        nothing waits, and the job runs on without a task.
    :param keep_checkpoints: keep the checkpoint files after the job succeeds (else the master's actor removes
        them, as the local backend does).
    :param progress_timeout: the hang watchdog's limit in seconds (``None``: none), whose clock the driver keeps.
    """
    options = options or RayOptions()
    if options.placement_strategy not in STRATEGIES:
        raise ValueError(f"placement strategy {options.placement_strategy!r} is not one of {', '.join(STRATEGIES)}")
    return {
        "job_name": job_name,
        "spec": spec.model_dump(mode="json", exclude_none=True, by_alias=True),
        "command": list(command),
        "layout": {"model_dir": layout.model_dir, "output_path": layout.output_path, "files_dir": layout.files_dir,
                   "checkpoint_dir": layout.checkpoint_dir},
        "files": dict(files),
        "env": dict(env or {}),
        "try_number": try_number,
        "bundles": bundles(spec, options.bundle_resources()),
        "strategy": options.placement_strategy,
        "liveness_key": liveness_key(job_name) if liveness else None,
        "liveness_grace": options.liveness_grace,
        "startup_timeout": startup_timeout,
        "settle_period": settle_period,
        "stop_grace_period": stop_grace_period,
        "poll_interval": poll_interval,
        "keep_checkpoints": keep_checkpoints,
        "progress_timeout": progress_timeout,
    }


def ray_job(description: Mapping[str, Any], interpreter: str) -> tuple[str, dict[str, Any]]:
    """``(entrypoint, runtime_env)`` of the Ray Job: ``interpreter`` (the cluster's Python: the entrypoint runs
    with the cluster's PATH, so it is named) runs the driver with the description in ``JOB_VARIABLE``.

    The driver prints every line of its actors (``RAY_DEDUP_LOGS=0``): Ray's default folds lines of different actors
    that differ only in their numbers into one ("repeated 2x across cluster"), which would drop from the job's log
    the lines of all but one replica or process, their ranks and losses among them."""
    entrypoint = shlex.join([interpreter, "-m", DRIVER_MODULE])
    return entrypoint, {"env_vars": {JOB_VARIABLE: json.dumps(description, separators=(",", ":")),
                                     "RAY_DEDUP_LOGS": "0"}}


def ray_startup(report: Mapping[str, Any] | None, created: float | None = None) -> dict[str, Any]:
    """The ``startup`` section of a Ray job (``jobstate.startup``) from the driver's report of its moments:
    ``{"created": when it asked for the placement group, "admitted": when the cluster granted it, "replicas": [{"name",
    "placed", "started", "first_line", "first_report"}, ...]}`` (epoch seconds, master first; ``None``: not seen).
    ``{}`` when the report names no replica (the placement group was never granted: no replica got a name).

    :param created: when the Ray Job was submitted (its ``start_time``): the job's creation, where the cluster says
        it; the phases count from the earlier of it and the driver's request for the placement group.
    """
    if not isinstance(report, Mapping):
        return {}
    rows = [row for row in report.get("replicas") or ()
            if isinstance(row, Mapping) and isinstance(row.get("name"), str)]
    if not rows:
        return {}
    asked, admitted = _moment(report.get("created")), _moment(report.get("admitted"))
    replicas = [actor_startup(row["name"], created=asked, admitted=admitted, placed=_moment(row.get("placed")),
                              started=_moment(row.get("started")), first_line=_moment(row.get("first_line")),
                              first_report=_moment(row.get("first_report"))) for row in rows]
    start = min((moment for moment in (_moment(created), asked) if moment is not None), default=None)
    return job_startup(replicas, master=rows[0]["name"], unknown=ACTOR_UNKNOWN, created=start)


def _moment(value: Any) -> float | None:
    """An epoch time of a report, or ``None`` (not seen, or not a time)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value <= 0:
        return None
    return float(value)


def report_line(report: Mapping[str, Any]) -> str:
    """One report of the driver as a line of its log."""
    return REPORT_MARK + json.dumps(report, separators=(",", ":"))


def last_report(logs: str, kind: str | None = None) -> dict[str, Any] | None:
    """The latest report in the driver's log (of ``kind`` when given: ``replicas``, ``live``, ``startup`` or
    ``outcome``), or ``None``.
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


__all__ = ["DEFAULT_LIVENESS_GRACE", "DEFAULT_WORK_ROOT", "DRIVER_MODULE", "JOB_VARIABLE", "REPORT_MARK", "STRATEGIES",
           "ActorAddressing", "RayOptions", "bundle", "bundles", "job_description", "job_layout", "last_report",
           "liveness_key", "ray_job", "ray_option_problems", "ray_startup", "renew_interval", "report_line"]

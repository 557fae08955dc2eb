"""What a job sends to MLflow, built from what the task already holds (pure: no client, no I/O).

The task logs the run from the Airflow side, from the ``job`` record every backend pushes when a try ends
(``outputs.job_record``: the master's metrics and their history with steps, the model path, what the job cost, how
it ended) and the spec's shape: training images need no MLflow client, and every backend and wait mode sends the
same. ``hooks/mlflow.py`` sends it.

One MLflow run per task instance and clear: a retry (or a resumed deferral) finds the run its first try opened by
the ``airflow_distributed.task_instance`` tag and goes on with it; a cleared task starts a new run. A clear is told
from a retry the way Airflow tells it (``RuntimeTaskInstance.get_first_reschedule_date``): clearing a task sets its
``max_tries`` to its try number plus ``retries``, so ``max_tries - retries + 1`` is the first try since the last
clear, the same for every retry after it and new after each clear.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any
from urllib.parse import quote

#: Every tag the provider sets starts with this.
TAG_PREFIX = "airflow_distributed."
#: The tag that finds a task instance's run again: a digest of the task instance and the first try since its last
#: clear (safe characters only, so the search filter needs no quoting of user text).
TASK_INSTANCE_TAG = TAG_PREFIX + "task_instance"
#: The registered model's version this run produced, once registered.
MODEL_VERSION_TAG = TAG_PREFIX + "model_version"
#: MLflow's own tag of a run's name, shown in its UI.
RUN_NAME_TAG = "mlflow.runName"
#: MLflow's limits of one ``log_batch`` call (metrics, and params with tags).
BATCH_METRICS, BATCH_PARAMS_AND_TAGS = 1000, 100
#: MLflow refuses a param value longer than this (characters); a longer one is cut.
PARAM_VALUE_LIMIT = 6000
#: Run states MLflow knows, by the job's ending: ``KILLED`` is a try Airflow stopped (``on_kill``).
FINISHED, FAILED, KILLED, RUNNING = "FINISHED", "FAILED", "KILLED", "RUNNING"
#: What the ``job`` record's usage holds besides figures: not metrics.
_USAGE_NOT_FIGURES = frozenset({"replicas", "replicas_left_out"})
# MLflow's rule for metric and param names: alphanumerics, underscores, dashes, periods, spaces, slashes.
_NOT_IN_A_NAME = re.compile(r"[^\w\-. /]")


def first_try_since_clear(try_number: int, max_tries: int, retries: int) -> int:
    """The first try of the task instance since it was last cleared (1 when it never was): ``max_tries - retries
    + 1``, as Airflow counts it; never past ``try_number`` (an operator whose ``retries`` changed since)."""
    return max(1, min(try_number, max_tries - retries + 1))


@dataclass(frozen=True)
class RunKey:
    """The task instance an MLflow run belongs to, and the first try since its last clear: one run per key."""

    dag_id: str
    task_id: str
    run_id: str
    map_index: int
    first_try: int

    @property
    def digest(self) -> str:
        """The ``TASK_INSTANCE_TAG`` value: hex only, whatever characters the ids hold."""
        ids = json.dumps([self.dag_id, self.task_id, self.run_id, self.map_index, self.first_try])
        return hashlib.sha256(ids.encode()).hexdigest()[:32]

    def search_filter(self) -> str:
        """The ``search_runs`` filter that finds this key's run."""
        return f"tags.`{TASK_INSTANCE_TAG}` = '{self.digest}'"

    def tags(self) -> dict[str, str]:
        """The tags that name the task instance, set when the run is created."""
        return {
            TASK_INSTANCE_TAG: self.digest,
            TAG_PREFIX + "dag_id": self.dag_id,
            TAG_PREFIX + "task_id": self.task_id,
            TAG_PREFIX + "run_id": self.run_id,
            TAG_PREFIX + "map_index": str(self.map_index),
            TAG_PREFIX + "first_try": str(self.first_try),
        }


def try_tags(*, try_number: int, job_name: str, framework: str, backend: str) -> dict[str, str]:
    """The tags each try sets: which try runs the job now, and what runs it."""
    return {
        RUN_NAME_TAG: job_name,
        TAG_PREFIX + "try_number": str(try_number),
        TAG_PREFIX + "job_name": job_name,
        TAG_PREFIX + "framework": framework,
        TAG_PREFIX + "backend": backend,
    }


def job_params(*, framework: str, backend: str, roles: Sequence[Mapping[str, Any]],
               processes_per_replica: int | None, dag_params: Mapping[str, Any],
               chosen: Sequence[str]) -> dict[str, str]:
    """The job's shape as MLflow params, set once, when the run is created (MLflow keeps a param's first value).

    :param roles: the plan's ``role_summary``: ``[{"role", "count", "resources"}]``; a role listed twice (an indexed
        override with other resources) is counted once, with each group's resources numbered.
    :param processes_per_replica: ``environment.pytorch.n_proc_per_node``, when given.
    :param dag_params: the DAG run's params (``context["params"]``).
    :param chosen: the names of the DAG's params to log, as ``param.<name>``; a name the run lacks is left out.
    """
    params = {"framework": framework, "backend": backend, "replicas": str(sum(int(r["count"]) for r in roles))}
    groups: dict[str, list[Mapping[str, Any]]] = {}
    for role in roles:
        groups.setdefault(str(role["role"]), []).append(role)
    for name, listed in groups.items():
        params[f"replicas.{name}"] = str(sum(int(r["count"]) for r in listed))
        for position, group in enumerate(listed):
            if group.get("resources"):
                suffix = "" if len(listed) == 1 else f".{position}"
                params[f"resources.{name}{suffix}"] = json.dumps(group["resources"], sort_keys=True)
    if processes_per_replica is not None:
        params["processes_per_replica"] = str(processes_per_replica)
    for name in chosen:
        if name in dag_params:
            value = dag_params[name]
            text = value if isinstance(value, str) else json.dumps(value, sort_keys=True, default=str)
            params[f"param.{name}"] = text
    return {_metric_name(key): value[:PARAM_VALUE_LIMIT] for key, value in params.items()}


def metric_points(record: Mapping[str, Any], *, try_number: int) -> list[tuple[str, float, int]]:
    """``(key, value, step)`` of everything numeric a try's ``job`` record holds, in the order to log them.

    - each point of the master's ``history`` at its own step (the script's steps: a try that resumed from a
      checkpoint goes on from there, so the run's steps go on across tries);
    - each final metric the history never holds, at the last step of the history (0 without one);
    - the job's figures, at ``step = try_number``: ``airflow.duration_seconds``, ``airflow.restarts`` and each
      ``usage.<figure>`` of the usage over every try so far.

    Values that are not numbers (strings, lists, ``null`` for a NaN, booleans) are left out.
    """
    points: list[tuple[str, float, int]] = []
    in_history: set[str] = set()
    last_step = 0
    for point in record.get("history") or []:
        if not isinstance(point, Mapping) or not _is_step(point.get("step")):
            continue
        step = int(point["step"])
        last_step = max(last_step, step)
        for key, value in point.items():
            if key != "step" and _is_number(value):
                in_history.add(key)
                points.append((_metric_name(key), float(value), step))
    for key, value in (record.get("metrics") or {}).items():
        if key not in in_history and _is_number(value):
            points.append((_metric_name(key), float(value), last_step))
    figures: dict[str, Any] = {"airflow.duration_seconds": record.get("duration_seconds"),
                               "airflow.restarts": record.get("restarts")}
    usage = record.get("usage")
    if isinstance(usage, Mapping):
        figures.update({f"usage.{key}": value for key, value in usage.items() if key not in _USAGE_NOT_FIGURES})
    points.extend((key, float(value), try_number) for key, value in figures.items() if _is_number(value))
    return points


def ending_tags(record: Mapping[str, Any]) -> dict[str, str]:
    """How the try ended and where its model is, as tags."""
    tags = {TAG_PREFIX + "state": str(record.get("state") or "failed")}
    if isinstance(record.get("model_path"), str):
        tags[TAG_PREFIX + "model_path"] = record["model_path"][:PARAM_VALUE_LIMIT]
    return tags


def run_status(succeeded: bool, killed: bool = False) -> str:
    """The run's status once the try ended: a retry sets it back to ``RUNNING``, so it ends as the task ends.

    :param killed: Airflow stopped the try (its ``on_kill``: marked failed or success, ``execution_timeout``, the
        worker's SIGTERM): ``KILLED``, MLflow's word for a run stopped from outside, rather than a training failure.
    """
    if killed:
        return KILLED
    return FINISHED if succeeded else FAILED


def batches(items: Sequence[Any], size: int) -> Iterable[Sequence[Any]]:
    """``items`` in slices MLflow takes in one call."""
    for start in range(0, len(items), size):
        yield items[start:start + size]


def run_url(tracking_uri: str, experiment_id: str, run_id: str) -> str:
    """The run's page in the tracking server's UI."""
    return f"{tracking_uri.rstrip('/')}/#/experiments/{quote(experiment_id, safe='')}/runs/{quote(run_id, safe='')}"


def model_version_url(tracking_uri: str, model_name: str, version: int) -> str:
    """A registered model version's page in the tracking server's UI."""
    return f"{tracking_uri.rstrip('/')}/#/models/{quote(model_name, safe='')}/versions/{version}"


def model_version_of(tag: Any, model_name: str | None) -> int | None:
    """The version number a run's ``MODEL_VERSION_TAG`` (``<name>/<version>``) gives of ``model_name``; None when
    the tag is missing, malformed, or names another model."""
    if not isinstance(tag, str) or not model_name:
        return None
    name, _, version = tag.rpartition("/")
    return int(version) if name == model_name and version.isascii() and version.isdigit() else None


def _metric_name(key: str) -> str:
    return _NOT_IN_A_NAME.sub("_", str(key))[:250] or "_"


def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and value == value  # NaN is not


def _is_step(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0


__all__ = [
    "FAILED",
    "FINISHED",
    "KILLED",
    "RUNNING",
    "TASK_INSTANCE_TAG",
    "RunKey",
    "batches",
    "ending_tags",
    "first_try_since_clear",
    "job_params",
    "metric_points",
    "model_version_of",
    "model_version_url",
    "run_status",
    "run_url",
    "try_tags",
]

"""The trained model as an Airflow Asset: the outlet a ``model_asset=`` URI template stands for, and the event's
``extra`` (pure).

A URI whose placeholders are all known when the DAG is parsed (``{dag_id}``, ``{task_id}``) is one ``Asset``, so a
downstream DAG can be scheduled on it and finds each run's model path and metrics in the event's ``extra``. A URI
that names the run (``{job_name}``, ``{run_id}``, ``{map_index}``) is a new asset per run: the task's outlet is then
an ``AssetAlias`` (``airflow-distributed.<dag_id>.<task_id>.model``) through which each run adds its own asset.
"""

from __future__ import annotations

import string
from collections.abc import Mapping
from typing import Any

PARSE_TIME_FIELDS = ("dag_id", "task_id")
RUN_TIME_FIELDS = ("job_name", "run_id", "map_index")


def template_fields(template: str) -> set[str]:
    """The placeholders of a URI template; ``ValueError`` for a malformed one."""
    return {name for _, name, _, _ in string.Formatter().parse(template) if name is not None}


def template_problems(template: Any) -> list[str]:
    """Why ``template`` is no usable ``model_asset``; empty when it is."""
    if not isinstance(template, str) or not template.strip():
        return ["must be a URI template string, e.g. 's3://models/{dag_id}/{task_id}'"]
    try:
        names = template_fields(template)
    except ValueError as error:
        return [f"is not a valid template ({error}); write a literal brace as '{{{{' or '}}}}'"]
    unknown = sorted(names - set(PARSE_TIME_FIELDS) - set(RUN_TIME_FIELDS))
    if unknown:
        allowed = ", ".join("{" + name + "}" for name in (*PARSE_TIME_FIELDS, *RUN_TIME_FIELDS))
        return [f"unknown placeholder(s) {', '.join(unknown)}; allowed: {allowed}"]
    return []


def names_the_run(template: str) -> bool:
    return bool(template_fields(template) & set(RUN_TIME_FIELDS))


def alias_name(dag_id: str, task_id: str) -> str:
    return f"airflow-distributed.{dag_id}.{task_id}.model"


def model_uri(template: str, **fields: Any) -> str:
    return template.format(**{name: fields.get(name, "") for name in template_fields(template)})


def event_extra(result: Mapping[str, Any]) -> dict[str, Any]:
    """What a model's asset event carries: the model path, the metrics and where they came from (JSON-safe)."""
    return {
        "model_path": result.get("model_path"),
        "metrics": dict(result.get("metrics") or {}),
        "job_name": result.get("job_name"),
        "framework": result.get("framework"),
        "backend": result.get("backend"),
    }

"""The output document the master writes, and the operator's XCom built from it (pure).

``job_result`` is the one place a task's XComs come from: the operator (every backend, sync or deferred) and the
sensors return it, and Airflow pushes each of its keys as an XCom of its own (``multiple_outputs``). A master
that reported no model path gives ``model_path: None``, one that reported no metrics ``metrics: {}`` (a mapping
still, so ``metrics.get("loss")`` works downstream); a key a task never returned (``model_path`` after
``wait_for_completion=False``) resolves to ``None`` in ``train.output["model_path"]``, not ``XComNotFound``.
Only the ``job`` record for the job view is pushed apart, because it is pushed on failure too.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping, Sequence
from typing import Any

from airflow_distributed.status import ReplicaStatus


def parse_output_document(text: str | None) -> dict[str, Any]:
    """``{"metrics": {...}, "model_path": ..., "history": [...]}``; tolerant of a missing or partial document."""
    if not text:
        return {"metrics": {}, "model_path": None, "history": []}
    try:
        doc = json.loads(text)
    except json.JSONDecodeError as err:
        raise ValueError(f"the master's output document is not JSON: {err}") from None
    if not isinstance(doc, dict):
        raise ValueError("the master's output document must be a JSON object")
    metrics = doc.get("metrics") or {}
    parsed: dict[str, Any] = {
        "metrics": {str(k): _json_safe(v) for k, v in metrics.items()} if isinstance(metrics, Mapping) else {},
        "model_path": doc.get("model_path"),
        "history": doc.get("history") if isinstance(doc.get("history"), list) else [],
    }
    if "return_value" in doc:  # written by a @task.distributed function's master
        parsed["return_value"] = doc["return_value"]
    if isinstance(doc.get("progress"), Mapping):  # tracking.log_progress
        parsed["progress"] = dict(doc["progress"])
    return parsed


def _json_safe(value: Any) -> Any:
    if isinstance(value, float) and not math.isfinite(value):
        return None
    return value


def job_result(
    *,
    job_name: str,
    framework: str,
    backend: str,
    state: str,
    document: Mapping[str, Any],
    replicas: Sequence[ReplicaStatus],
    namespace: str | None = None,
) -> dict[str, Any]:
    """The operator's ``return_value`` (CONTRACT.md "Output document"); small and JSON-safe."""
    result = {
        "job_name": job_name,
        "framework": framework,
        "backend": backend,
        "state": state,
        "metrics": dict(document.get("metrics") or {}),
        "model_path": document.get("model_path"),
        "replicas": [
            {"name": r.name, "role": r.role, "index": r.index, "state": r.state, "exit_code": r.exit_code,
             "restarts": r.restarts}
            for r in replicas
        ],
        # replicas started again and worker groups restarted by an elastic agent, over the whole job
        "restarts": sum(r.restarts for r in replicas),
    }
    if namespace is not None:
        result["namespace"] = namespace
    if "return_value" in document:
        result["return_value"] = document["return_value"]
    return result


#: Bounds that keep the ``job`` XCom small whatever the job logged.
HISTORY_POINTS = 200
LOG_LINES = 30
LOG_REPLICAS = 64
LINE_CHARS = 500


def job_record(
    result: Mapping[str, Any], document: Mapping[str, Any], logs: Mapping[str, Sequence[str]], duration: float
) -> dict[str, Any]:
    """The ``job`` XCom: the result plus what a job view shows (metric history, each replica's last lines)."""
    return {
        **result,
        "duration_seconds": round(duration, 3),
        "history": downsample(list(document.get("history") or []), HISTORY_POINTS),
        **({"progress": document["progress"]} if document.get("progress") else {}),
        "logs": {
            name: [line[:LINE_CHARS] for line in list(lines)[-LOG_LINES:]]
            for name, lines in list(logs.items())[:LOG_REPLICAS]
        },
    }


def downsample(points: list[Any], limit: int) -> list[Any]:
    """At most ``limit`` evenly spaced points, always keeping the first and the last."""
    if len(points) <= limit:
        return points
    step = (len(points) - 1) / (limit - 1)
    return [points[round(i * step)] for i in range(limit)]

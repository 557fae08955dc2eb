"""The output document the master writes, read and sanitised, and the operator's XCom built from it (pure).

``parse_output_document`` is the one way a master's report comes in, on every backend and in the sensors: whatever
the master wrote, what comes out is strict JSON within documented bounds (``strict_json``), so the XComs, the asset
event, the OpenLineage facet, the task log and the job view built from it cannot fail on it or grow with it. A
report never fails a job whose replicas succeeded: what cannot be read is a warning and no metrics.

``job_result`` is the one place a task's XComs come from: the operator (every backend, sync or deferred) and the
sensors return it, and Airflow pushes each of its keys as an XCom of its own (``multiple_outputs``). A master
that reported no model path gives ``model_path: None``, one that reported no metrics ``metrics: {}`` (a mapping
still, so ``metrics.get("loss")`` works downstream); a key a task never returned (``model_path`` after
``wait_for_completion=False``) resolves to ``None`` in ``train.output["model_path"]``, not ``XComNotFound``.
Only the ``job`` record for the job view is pushed apart, because it is pushed on failure too.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

from airflow_distributed.contract import REPORTED_AT, empty_document
from airflow_distributed.manifests.container_scripts import TERMINATION_MESSAGE_LIMIT
from airflow_distributed.status import ReplicaStatus, plain
from airflow_distributed.strict_json import DROPPED, StrictJson, downsample, strict_number

#: The key the output relay adds to a document it cut to fit a termination message
#: (``manifests.container_scripts.RELAY_OUTPUT``).
TRUNCATED = "truncated"

#: A document longer than this (characters) is not parsed: a warning, no metrics.
DOCUMENT_TEXT_LIMIT = 16 * 2**20
#: What the sanitised document may take in all, as ``json.dumps`` writes it (``return_value`` and ``metrics``
#: included): what comes after the point this is spent is dropped, in the order model path, metrics, return value,
#: history.
DOCUMENT_LIMIT = 2**20
#: Bounds that keep the ``job`` XCom small whatever the job logged (the document's history is cut to as many).
HISTORY_POINTS = 200

#: Keys of a parsed document besides the report: a line saying what sanitising changed or why the text could not be
#: read, and that it could not be read at all.
WARNINGS, UNREADABLE = "warnings", "unreadable"
# The document's own keys and a progress record, never more than this: kept out of the budget so that a budget spent
# on metrics still leaves room for them.
_FRAME = 512


def parse_output_document(text: str | None) -> dict[str, Any]:
    """``{"metrics": {...}, "model_path": ..., "history": [...]}`` (and ``progress``, ``return_value`` when
    reported), sanitised into strict JSON within the limits (CONTRACT.md "Output document").

    Never raises: the report of a job is not its verdict. A document that cannot be read (not JSON, not an object,
    too large, too deeply nested) gives no metrics, ``unreadable: True`` and a ``warnings`` line saying why; one
    whose values had to be changed keeps what it could, with a ``warnings`` line saying where.
    """
    if not text or not text.strip():
        return empty_document()
    if len(text) > DOCUMENT_TEXT_LIMIT:
        return _unreadable(f"it is larger than {DOCUMENT_TEXT_LIMIT // 2**20} MiB")
    try:
        # The integer hook keeps a number of thousands of digits from hitting Python's int conversion limit.
        doc = json.loads(text, parse_constant=lambda name: float("nan"), parse_int=_integer)
    except json.JSONDecodeError as error:  # its message names a position, never the text
        return _unreadable(f"it is not JSON ({error.msg} at line {error.lineno} column {error.colno})")
    except RecursionError:
        return _unreadable("it is nested too deeply to read")
    if not isinstance(doc, dict):
        return _unreadable("it is not a JSON object")
    return sanitise_document(doc)


def sanitise_document(doc: Mapping[str, Any]) -> dict[str, Any]:
    """A decoded output document as strict JSON within ``DOCUMENT_LIMIT``; see :func:`parse_output_document`."""
    clean = StrictJson(DOCUMENT_LIMIT - _FRAME)
    parsed: dict[str, Any] = empty_document()
    model_path = doc.get("model_path")
    if isinstance(model_path, str):
        parsed["model_path"] = _kept(clean.clean(model_path, "model_path"))
    elif model_path is not None:
        clean.note("model_path", f"a {_json_type(model_path)}, not a string: ignored")
    if doc.get("progress") is not None:  # tracking.log_progress
        progress = _progress(doc["progress"], clean)
        if progress is not None:
            parsed["progress"] = progress
    if doc.get(REPORTED_AT) is not None:  # tracking's stamp of its newest report, for the hang watchdog
        reported_at = doc[REPORTED_AT]
        if isinstance(reported_at, (int, float)) and not isinstance(reported_at, bool) and 0 <= reported_at < 2**53:
            parsed[REPORTED_AT] = float(reported_at)
        else:
            clean.note(REPORTED_AT, f"a {_json_type(reported_at)} that is not a time, ignored")
    metrics = doc.get("metrics")
    if isinstance(metrics, Mapping):
        parsed["metrics"] = _kept(clean.clean(metrics, "metrics"), {})
    elif metrics is not None:
        clean.note("metrics", f"a {_json_type(metrics)}, not an object: ignored")
    if "return_value" in doc:  # written by a @task.distributed function's master
        exhausted = clean.exhausted
        value = clean.clean(doc["return_value"], "return_value")
        if clean.exhausted and not exhausted:  # a cut-down value would be a different value: none at all
            value = None
        parsed["return_value"] = _kept(value)
    history = doc.get("history")
    if isinstance(history, list):
        points = [point for point in history if isinstance(point, Mapping)]
        if len(points) < len(history):
            clean.note("history", f"{len(history) - len(points)} points that are not objects dropped")
        parsed["history"] = _kept(clean.clean(downsample(points, HISTORY_POINTS), "history"), [])
    elif history is not None:
        clean.note("history", f"a {_json_type(history)}, not a list: ignored")
    warning = clean.warning()
    warnings = [f"the master's output document was sanitised: {warning}"] if warning is not None else []
    if doc.get(TRUNCATED) is True:
        # The output relay's brief of a document too long for the termination message (no XCom sidecar read it):
        # what it left out is gone, and the user should know the history is not the job's.
        warnings.append(f"the master's output document was longer than a termination message holds "
                        f"({TERMINATION_MESSAGE_LIMIT} bytes) and no XCom sidecar read it: only its metrics and model "
                        f"path were kept (its history, progress and return value are lost)")
    if warnings:
        parsed[WARNINGS] = warnings
    return parsed


def document_warning(document: Mapping[str, Any]) -> str | None:
    """What the task log says about a document that was sanitised or could not be read; ``None`` if nothing."""
    warnings = document.get(WARNINGS)
    return "; ".join(warnings) if warnings else None


def _progress(raw: Any, clean: StrictJson) -> dict[str, Any] | None:
    """``step``, ``total`` (whole numbers), ``percent`` (0 to 100) and ``eta_seconds`` (>= 0): those of them the
    document has, each ``None`` when it is not what it should be; other keys are left out."""
    if not isinstance(raw, Mapping):
        clean.note("progress", f"a {_json_type(raw)}, not an object: ignored")
        return None
    progress: dict[str, Any] = {}
    for key in ("step", "total", "percent", "eta_seconds"):
        if key not in raw:
            continue
        value = raw[key]
        number = None if isinstance(value, bool) or not isinstance(value, (int, float)) else strict_number(value)
        if key in ("step", "total") and not (isinstance(number, int) and number >= 0):
            number = None
        elif key == "percent" and number is not None:
            number = min(100.0, max(0.0, number))
        elif key == "eta_seconds" and number is not None and number < 0:
            number = None
        if number is None and value is not None:
            clean.note(f"progress.{key}", f"a {_json_type(value)} that is not a valid {key}, became null")
        progress[key] = number
    return progress


def _integer(digits: str) -> int | float:
    return int(digits) if len(digits) <= 20 else float(digits)


def _kept(value: Any, instead: Any = None) -> Any:
    return instead if value is DROPPED else value


def _json_type(value: Any) -> str:
    """The JSON name of a value's type, for a note (never the value: it may be a secret)."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, (int, float)):
        return "number"
    if isinstance(value, str):
        return "string"
    return "list" if isinstance(value, (list, tuple)) else "object" if isinstance(value, Mapping) else "value"


def _unreadable(why: str) -> dict[str, Any]:
    return {**empty_document(), UNREADABLE: True,
            WARNINGS: [f"the master's output document could not be read, so no metrics were taken from it: {why}"]}


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
        "state": plain(state),  # the bare word: the returned value is logged, and a member's repr is not it
        "metrics": dict(document.get("metrics") or {}),
        "model_path": document.get("model_path"),
        "replicas": [
            {"name": r.name, "role": r.role, "index": r.index, "state": plain(r.state), "exit_code": r.exit_code,
             "restarts": r.restarts,
             # a replica of several processes, or of GPUs, says so (the job view's counts); most jobs' rows stay as
             # they were
             **r.counts()}
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


def job_record(
    result: Mapping[str, Any], document: Mapping[str, Any], duration: float, usage: Mapping[str, Any] | None = None,
    startup: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """The ``job`` XCom: the result plus what a job view shows (metric history, progress) and, when given, what the
    job cost (``jobstate.usage``) and how it started (``jobstate.startup``). No replica's line: those are the task
    log's (``jobstate.last_lines``), which Airflow lets fewer users read than XComs."""
    return {
        **result,
        "duration_seconds": round(duration, 3),
        "history": downsample(list(document.get("history") or []), HISTORY_POINTS),
        **({"progress": document["progress"]} if document.get("progress") else {}),
        **({"usage": dict(usage)} if usage is not None else {}),
        **({"startup": dict(startup)} if startup else {}),
    }


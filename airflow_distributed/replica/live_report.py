"""The live record: one line the master's ``tracking`` calls print, for the job view of a running cluster job.

On Kubernetes the master's output document is read when the job ends; while it runs, the view reads the master's
log tail (``plugins.live_kubernetes``, bounded and time-boxed) and takes the newest line that starts with
``PREFIX``: compact strict JSON with the progress, the latest metrics and the history so far (evenly thinned), and
when the master made its newest report (``reported_at``), at most ``RECORD_LIMIT`` characters. The task log and the
recorded tails leave these lines out (``is_record``). The hang watchdog of a cluster job reads them too: a record
printed late (held back to the end of its interval) still says when its report was made.

Standard library only (``strict_json`` is too): ``tracking`` prints the lines in training images that have no Airflow.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from typing import Any

from airflow_distributed.contract import REPORTED_AT
from airflow_distributed.strict_json import downsample

#: What starts a live record line; nothing a training script prints by chance.
PREFIX = "@airflow-distributed/live "
#: A record line is at most this many characters: the history is thinned, then left out, then the metrics.
RECORD_LIMIT = 16 * 1024
#: How a record with progress begins (``record_line``'s first key, compact JSON).
PROGRESS_RECORD = PREFIX + '{"progress":{'
#: Points of the history a record carries at most (the final record keeps 200).
RECORD_HISTORY = 100
#: Seconds between two records at most, when nothing asks for less: a master that logs every step prints one record
#: per interval, the newest state, and one held back is printed when its interval ends.
RECORD_INTERVAL = 5.0


def record_interval(progress_timeout: float | None) -> float:
    """The interval between two records of a job (``contract.ENV_RECORD_INTERVAL``): with ``progress_timeout``, at
    most a quarter of it, so that a record held back when the master blocks right after a burst of reports is in
    its log long before the watchdog's deadline (a look sees it within another quarter).

    :param progress_timeout: the job's ``progress_timeout`` in seconds, or ``None``.
    """
    if progress_timeout is None:
        return RECORD_INTERVAL
    return min(RECORD_INTERVAL, progress_timeout / 4)


def record_line(document: Mapping[str, Any]) -> str | None:
    """The record line of an output document (``progress``, ``metrics``, ``history``), or None when even the
    progress alone does not fit."""
    history = list(document.get("history") or [])
    record: dict[str, Any] = {"progress": document.get("progress"), "metrics": document.get("metrics") or {},
                              "history": downsample(history, RECORD_HISTORY)}
    if document.get(REPORTED_AT) is not None:
        record[REPORTED_AT] = document[REPORTED_AT]
    while True:
        line = PREFIX + json.dumps(record, allow_nan=False, separators=(",", ":"), default=str)
        if len(line) <= RECORD_LIMIT:
            return line
        if record["history"]:
            points = record["history"]
            record["history"] = downsample(points, len(points) // 2) if len(points) >= 4 else []
        elif record["metrics"]:
            record["metrics"] = {}
        else:
            return None


def is_record(line: str) -> bool:
    return line.startswith(PREFIX)


def reports_progress(line: str) -> bool:
    """Whether a record line carries progress (``record_line`` writes ``progress`` first, compact): the first such
    line is when the master took its first step (a startup phase, ``jobstate.startup``)."""
    return line.startswith(PROGRESS_RECORD)


def latest_record(lines: Iterable[str]) -> dict[str, Any] | None:
    """The newest readable record among ``lines`` (a log's tail), decoded but not sanitised: the caller passes it to
    ``outputs.sanitise_document``. A line cut short or not JSON is skipped."""
    for line in reversed(list(lines)):
        if not is_record(line):
            continue
        try:
            record = json.loads(line[len(PREFIX):], parse_constant=lambda name: None)
        except (ValueError, RecursionError):
            continue
        if isinstance(record, dict):
            return record
    return None


def without_records(lines: Iterable[str]) -> list[str]:
    """A log's lines, the live records left out."""
    return [line for line in lines if not is_record(line)]


__all__ = ["PREFIX", "PROGRESS_RECORD", "RECORD_HISTORY", "RECORD_INTERVAL", "RECORD_LIMIT", "is_record",
           "latest_record", "record_interval", "record_line", "reports_progress", "without_records"]

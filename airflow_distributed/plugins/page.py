"""The job view as one self-contained HTML page (pure): inline CSS, inline SVG charts, no script.

It is shown inside the Airflow UI's frame on the task instance page, so it stays plain and compact and
follows the reader's light or dark colour scheme. Replica logs switch with radio buttons styled as tabs,
which needs no JavaScript, so the page can be served with a policy that forbids every script.

The markup lives in ``templates/*.html``, rendered with autoescaping: what a job wrote (replica names,
metric names, log lines) reaches the page as text, never as markup. The functions here only shape the
record into plain values for the templates.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from typing import Any

from jinja2 import Environment, PackageLoader, StrictUndefined
from markupsafe import Markup

from airflow_distributed.plugins.charts import finite, format_integer, format_number, line_chart, series, waterfall
from airflow_distributed.status import progress_text
from airflow_distributed.task_instance import TaskInstanceRef

#: Task instance states in which the record may still appear: the "no record yet" page reloads itself.
UNFINISHED = {"none", "scheduled", "queued", "running", "deferred", "up_for_retry", "up_for_reschedule", "restarting"}
REFRESH_SECONDS = 10

_ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")

# StrictUndefined: a name the template uses but the page did not pass is a bug, not an empty string.
_TEMPLATES = Environment(
    loader=PackageLoader("airflow_distributed.plugins", "templates"),
    autoescape=True,
    undefined=StrictUndefined,
    trim_blocks=True,
    lstrip_blocks=True,
)


def _text(value: Any) -> str:
    return "" if value is None else str(value)


def format_duration(seconds: Any) -> str:
    """``"42.1 s"``, ``"3 min 05 s"``, ``"2 h 01 min"``; empty when unknown."""
    seconds = finite(seconds)
    if seconds is None or seconds < 0:
        return ""
    if seconds < 60:
        return f"{seconds:.1f} s"
    minutes, secs = divmod(round(seconds), 60)
    if minutes < 60:
        return f"{minutes} min {secs:02d} s"
    hours, minutes = divmod(minutes, 60)
    return f"{hours} h {minutes:02d} min"


def format_value(value: Any) -> str:
    if isinstance(value, bool) or value is None:
        return json.dumps(value)
    if isinstance(value, int):
        return format_integer(value)
    if isinstance(value, float):
        return format_number(value)
    if isinstance(value, str):
        return value
    return json.dumps(value, sort_keys=True)


def _render(template: str, title: str, *, refresh: bool = False, **values: Any) -> str:
    return _TEMPLATES.get_template(template).render(
        title=title, refresh=refresh, refresh_seconds=REFRESH_SECONDS, **values
    )


def _where(ref: TaskInstanceRef) -> str:
    mapped = f" [{ref.map_index}]" if ref.map_index >= 0 else ""
    return f"{ref.dag_id} / {ref.run_id} / {ref.task_id}{mapped}"


def _count(value: Any, default: int) -> int:
    """A row's ``processes`` or ``gpus``: a whole number above 0, else ``default`` (a row that leaves it unsaid runs
    one process, on no GPU)."""
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else default


def _replicas(replicas: Sequence[Any]) -> list[dict[str, Any]]:
    return [
        {
            "name": _text(r.get("name")), "role": _text(r.get("role")), "index": _text(r.get("index")),
            "state": _text(r.get("state")), "exit_code": r.get("exit_code"),
            # Records written before restarts were counted have none: a replica that was never restarted.
            "restarts": _text(r.get("restarts") or 0),
            "processes": _count(r.get("processes"), 1), "gpus": _count(r.get("gpus"), 0),
        }
        for r in replicas
        if isinstance(r, Mapping)
    ]


def _world(replicas: Sequence[Mapping[str, Any]]) -> str:
    """``world size 6: 2 replicas x 3 processes`` for a job whose replicas run several processes each; empty for
    one process per replica (the world size is the replica count, said by the table)."""
    counts = [r["processes"] for r in replicas]
    if not counts or max(counts) == 1:
        return ""
    each = f"{counts[0]} processes" if len(set(counts)) == 1 else "processes as listed"
    return f"world size {sum(counts)}: {len(counts)} replica{'s' if len(counts) != 1 else ''} \u00d7 {each}"


def _progress(progress: Any) -> dict[str, Any] | None:
    """Bar width and ``45% (450/1000 steps), about 2 min left``; None when the job reports no progress."""
    if not isinstance(progress, Mapping):
        return None
    percent = finite(progress.get("percent"))
    if percent is None:
        return None
    percent = min(100.0, max(0.0, percent))
    # Only numbers a float holds reach the text: a job may write any JSON number there.
    shown = {**progress, "percent": percent, "eta_seconds": finite(progress.get("eta_seconds"))}
    return {"percent": percent, "text": progress_text(shown)}


def _charts(history: Any) -> list[tuple[str, Markup]]:
    lines = series(history if isinstance(history, Sequence) else [])
    # line_chart escapes the title itself and writes only numbers otherwise: its SVG is markup.
    return [(name, Markup(line_chart(name, points))) for name, points in lines.items()]


def _logs(logs: Mapping[str, Sequence[str]] | None) -> list[tuple[str, str]] | None:
    if logs is None:
        return None
    return [
        (_text(name), _ANSI.sub("", "\n".join(str(line) for line in logs[name] or [])) or "(no output)")
        for name in logs
    ]


def _startup(startup: Any) -> dict[str, Any] | None:
    """The waterfall of a record's ``startup`` (``jobstate.startup``): the job (its slowest replica) then each
    replica, with the phases no replica of the backend reports and why; None without one."""
    if not isinstance(startup, Mapping) or not isinstance(startup.get("job"), Mapping):
        return None
    replicas, unknown = startup.get("replicas"), startup.get("unknown")
    rows = [("job (slowest)", startup["job"]),
            *((_text(name), row) for name, row in (replicas if isinstance(replicas, Mapping) else {}).items()
              if isinstance(row, Mapping))]
    unknown = unknown if isinstance(unknown, Mapping) else {}
    by = {"progress": "the master's first progress report", "line": "the last replica's first line"}
    return {
        # waterfall escapes the labels itself and writes only numbers otherwise: its SVG is markup
        "svg": Markup(waterfall(rows)),
        "rendezvous_by": by.get(str(startup.get("rendezvous_by")), "unknown"),
        "unknown": [(_text(phase).replace("_", " "), _text(why)) for phase, why in unknown.items()],
    }


def _usage(usage: Any) -> str:
    """``cost: 2.5 CPU-h, 4 GiB-h, 1 GPU-h over 2 tries`` from a record's ``usage``; empty without one."""
    if not isinstance(usage, Mapping):
        return ""
    parts = []
    for key, unit in (("cpu_seconds", "CPU-h"), ("memory_gib_seconds", "GiB-h"), ("gpu_seconds", "GPU-h")):
        value = finite(usage.get(key))
        if value:
            parts.append(f"{value / 3600:.3g} {unit}")
    tries = usage.get("tries")
    over = f" over {tries} tries" if isinstance(tries, int) and tries > 1 else ""
    return f"requested {', '.join(parts)}{over}" if parts else ""


def job_page(
    record: Mapping[str, Any], ref: TaskInstanceRef, *, source: str, show_logs: bool, json_href: str,
    mlflow: Any = None,
) -> str:
    """The job view of one task instance from its record (the ``job`` XCom shape).

    :param mlflow: the links of the task instance's MLflow run (``mlflow_links.MlflowLinks``), when it has one.
    """
    state = str(record.get("state") or "unknown")
    name = record.get("job_name") or ref.task_id
    replicas = _replicas(record.get("replicas") or [])
    meta = [
        _text(record.get("framework")),
        f"{record['backend']} backend" if record.get("backend") else "",
        _world(replicas),
        format_duration(record.get("duration_seconds")),
        _where(ref),
        f"{record['restarts']} restart{'s' if record['restarts'] != 1 else ''}"
        if isinstance(record.get("restarts"), int) and record["restarts"] > 0 else "",
        "final record" if source == "recorded" else f"{source} state",
        _usage(record.get("usage")),
    ]
    logs = record.get("logs") if isinstance(record.get("logs"), Mapping) else {}
    metrics = record.get("metrics") or {}
    return _render(
        "job.html",
        f"{name} \u00b7 distributed job",
        # A state that can still change reloads itself; the final record does not.
        refresh=source != "recorded",
        name=_text(name),
        state=state,
        meta=[item for item in meta if item],
        # Why a live state could not be read (``live_kubernetes``); a recorded job has none.
        note=_text(record.get("note")) if source != "recorded" else "",
        progress=_progress(record.get("progress")),
        replicas=replicas,
        # a column of ones, or of noughts, says nothing: shown where a replica runs several processes, or has GPUs
        processes_column=any(r["processes"] > 1 for r in replicas),
        gpus_column=any(r["gpus"] > 0 for r in replicas),
        metrics=[(_text(key), format_value(value)) for key, value in metrics.items()],
        model_path=_text(record.get("model_path")),
        charts=_charts(record.get("history") or []),
        startup=_startup(record.get("startup")),
        logs=_logs(logs if show_logs else None),
        json_href=json_href,
        mlflow=mlflow,
    )


def missing_page(ref: TaskInstanceRef, task_state: str | None) -> str:
    """No record (yet): says why, and reloads itself while the task instance may still produce one."""
    if task_state is None:
        message = "There is no such task instance."
    elif task_state in UNFINISHED:
        message = (f"The task is {task_state}: its job record appears when the job ends. "
                   f"This page reloads every {REFRESH_SECONDS} seconds.")
    else:
        message = (f"The task is {task_state} and left no job record: it did not start a job, "
                   "or it is not a DistributedTrainingOperator task.")
    return _render("missing.html", "No job record \u00b7 distributed job", refresh=task_state in UNFINISHED,
                   where=_where(ref), message=message)


def error_page(status_code: int, message: str) -> str:
    """A refusal or error, readable inside the UI's frame (instead of a bare JSON body)."""
    return _render("error.html", f"{status_code} \u00b7 distributed job", status_code=status_code, message=message)

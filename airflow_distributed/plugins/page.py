"""The job view as one self-contained HTML page (pure): inline CSS, inline SVG charts, no script.

It is shown inside the Airflow UI's frame on the task instance page, so it stays plain and compact and
follows the reader's light or dark colour scheme. Replica logs switch with radio buttons styled as tabs,
which needs no JavaScript, so the page can be served with a policy that forbids every script.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from html import escape
from typing import Any

from airflow_distributed.plugins.charts import format_number, line_chart, series
from airflow_distributed.plugins.job_state import TaskInstanceRef
from airflow_distributed.status import progress_text

#: Task instance states in which the record may still appear: the "no record yet" page reloads itself.
UNFINISHED = {"none", "scheduled", "queued", "running", "deferred", "up_for_retry", "up_for_reschedule", "restarting"}
REFRESH_SECONDS = 10

_ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")

_CSS = """
:root{color-scheme:light dark;--fg:#1a202c;--muted:#5f6b7a;--bg:#fff;--panel:#f5f7fa;--line:#dde2e8;
--accent:#1f6feb;--ok:#1a7f37;--bad:#cf222e;--run:#0969da;--warn:#9a6700}
@media (prefers-color-scheme:dark){:root{--fg:#e6edf3;--muted:#9aa7b4;--bg:#0f141a;--panel:#161d26;
--line:#2b3541;--accent:#58a6ff;--ok:#3fb950;--bad:#f85149;--run:#58a6ff;--warn:#d29922}}
*{box-sizing:border-box}
body{margin:0;padding:16px 20px;font:14px/1.45 system-ui,-apple-system,"Segoe UI",Roboto,sans-serif;
color:var(--fg);background:var(--bg)}
h1{font-size:20px;margin:0 8px 0 0;display:inline-block;font-weight:600}
h2{font-size:13px;text-transform:uppercase;letter-spacing:.04em;color:var(--muted);margin:20px 0 8px}
.meta{color:var(--muted);margin:6px 0 0}
.meta span+span:before{content:"\\00b7";margin:0 6px}
.badge{display:inline-block;padding:1px 9px;border-radius:10px;font-size:12px;font-weight:600;
color:#fff;vertical-align:3px;background:var(--muted)}
.state{font-weight:600;color:var(--muted)}
.s-succeeded{color:var(--ok)}.s-failed{color:var(--bad)}.s-running{color:var(--run)}.s-stopped{color:var(--warn)}
.badge.s-succeeded{background:var(--ok);color:#fff}.badge.s-failed{background:var(--bad);color:#fff}
.badge.s-running{background:var(--run);color:#fff}.badge.s-stopped{background:var(--warn);color:#fff}
table{border-collapse:collapse;min-width:320px}
th,td{text-align:left;padding:5px 12px 5px 0;border-bottom:1px solid var(--line);vertical-align:top}
th{font-size:12px;color:var(--muted);font-weight:600}
td.num{font-variant-numeric:tabular-nums}
table.metrics th{font-size:13px;font-weight:500;color:var(--fg);padding-right:28px}
code{font:12.5px ui-monospace,SFMono-Regular,Menlo,monospace;background:var(--panel);padding:2px 5px;
border-radius:4px;word-break:break-all}
.row{display:flex;flex-wrap:wrap;gap:8px 40px}
.charts{display:flex;flex-wrap:wrap;gap:12px}
figure{margin:0;padding:8px;background:var(--panel);border:1px solid var(--line);border-radius:6px}
figcaption{font-weight:600;font-size:13px;margin:0 0 2px 4px}
.chart .plot{fill:none;stroke:var(--line)}
.chart .line{fill:none;stroke:var(--accent);stroke-width:2;stroke-linejoin:round}
.chart .last{fill:var(--accent)}
.chart .tick{font-size:11px;fill:var(--muted)}
.tabs input{position:absolute;opacity:0}
.tabs label{display:inline-block;padding:4px 10px;margin:0 4px 4px 0;border:1px solid var(--line);
border-radius:5px;cursor:pointer;font-size:12.5px}
.tabs pre{display:none;margin:4px 0 0;padding:10px;max-height:340px;overflow:auto;background:var(--panel);
border:1px solid var(--line);border-radius:6px;font:12px/1.4 ui-monospace,SFMono-Regular,Menlo,monospace;
white-space:pre-wrap;word-break:break-all}
.note{color:var(--muted)}
.bar{width:min(520px,100%);height:10px;background:var(--panel);border:1px solid var(--line);border-radius:5px;
overflow:hidden}.bar span{display:block;height:100%;background:var(--run)}
.progress-text{margin:6px 0 0;font-variant-numeric:tabular-nums}
footer{margin-top:24px;font-size:12px;color:var(--muted)}
a{color:var(--accent)}
"""


def _text(value: Any) -> str:
    return escape("" if value is None else str(value))


def format_duration(seconds: Any) -> str:
    """``"42.1 s"``, ``"3 min 05 s"``, ``"2 h 01 min"``; empty when unknown."""
    if isinstance(seconds, bool) or not isinstance(seconds, (int, float)) or seconds < 0:
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
    if isinstance(value, (int, float)):
        return format_number(float(value))
    if isinstance(value, str):
        return value
    return json.dumps(value, sort_keys=True)


def _document(title: str, body: str, *, refresh: bool = False) -> str:
    head = f'<meta http-equiv="refresh" content="{REFRESH_SECONDS}">' if refresh else ""
    return (
        '<!doctype html><html lang="en"><head><meta charset="utf-8">'
        '<meta name="viewport" content="width=device-width,initial-scale=1">'
        f"{head}<title>{escape(title)}</title><style>{_CSS}</style></head><body>{body}</body></html>"
    )


def _where(ref: TaskInstanceRef) -> str:
    mapped = f" [{ref.map_index}]" if ref.map_index >= 0 else ""
    return f"{_text(ref.dag_id)} / {_text(ref.run_id)} / {_text(ref.task_id)}{mapped}"


def _replicas(replicas: Sequence[Mapping[str, Any]]) -> str:
    rows = "".join(
        "<tr>"
        f"<td><code>{_text(r.get('name'))}</code></td><td>{_text(r.get('role'))}</td>"
        f"<td class=num>{_text(r.get('index'))}</td>"
        f"<td class=\"state s-{_text(r.get('state'))}\">{_text(r.get('state'))}</td>"
        f"<td class=num>{'&ndash;' if r.get('exit_code') is None else _text(r.get('exit_code'))}</td>"
        # Records written before restarts were counted have none: a replica that was never restarted.
        f"<td class=num>{_text(r.get('restarts') or 0)}</td>"
        "</tr>"
        for r in replicas
        if isinstance(r, Mapping)
    )
    return (
        '<table class="replicas"><thead><tr><th>Replica</th><th>Role</th><th>Index</th><th>State</th>'
        f"<th>Exit code</th><th>Restarts</th></tr></thead><tbody>{rows}</tbody></table>"
    )


def _progress(progress: Any) -> str:
    """A bar and ``45% (450/1000 steps), about 2 min left``; nothing when the job reports no progress."""
    if not isinstance(progress, Mapping) or not isinstance(progress.get("percent"), (int, float)):
        return ""
    percent = min(100.0, max(0.0, float(progress["percent"])))
    return (
        f'<section class="progress"><h2>Progress</h2><div class="bar"><span style="width:{percent:.1f}%"></span>'
        f'</div><p class="progress-text">{_text(progress_text(progress))}</p></section>'
    )


def _metrics(metrics: Mapping[str, Any]) -> str:
    if not metrics:
        return '<p class="note">The master reported no metrics.</p>'
    rows = "".join(
        f"<tr><th>{_text(key)}</th><td class=num>{_text(format_value(value))}</td></tr>"
        for key, value in metrics.items()
    )
    return f'<table class="metrics"><tbody>{rows}</tbody></table>'


def _charts(history: Sequence[Any]) -> str:
    lines = series(history if isinstance(history, Sequence) else [])
    if not lines:
        return '<p class="note">No metric history was logged.</p>'
    figures = "".join(
        f"<figure><figcaption>{_text(name)}</figcaption>{line_chart(name, points)}</figure>"
        for name, points in lines.items()
    )
    return f'<div class="charts">{figures}</div>'


def _logs(logs: Mapping[str, Sequence[str]] | None) -> str:
    if logs is None:
        return '<p class="note">You may not read this task\'s logs.</p>'
    if not logs:
        return '<p class="note">No replica output was recorded.</p>'
    names = list(logs)
    # One rule per tab: a checked radio shows the pane with the same index.
    rules = "".join(f"#log-{i}:checked~#pane-{i}{{display:block}}#log-{i}:checked+label{{border-color:var(--accent);"
                    "color:var(--accent)}" for i in range(len(names)))
    tabs = "".join(
        f'<input type="radio" name="log" id="log-{i}"{" checked" if i == 0 else ""}>'
        f'<label for="log-{i}">{_text(name)}</label>'
        for i, name in enumerate(names)
    )
    panes = "".join(
        f'<pre id="pane-{i}" data-replica="{_text(name)}">'
        f"{_text(_ANSI.sub('', chr(10).join(str(line) for line in logs[name] or [])) or '(no output)')}</pre>"
        for i, name in enumerate(names)
    )
    return f'<style>{rules}</style><div class="tabs">{tabs}{panes}</div>'


def job_page(
    record: Mapping[str, Any], ref: TaskInstanceRef, *, source: str, show_logs: bool, json_href: str
) -> str:
    """The job view of one task instance from its record (the ``job`` XCom shape)."""
    state = str(record.get("state") or "unknown")
    name = record.get("job_name") or ref.task_id
    # Each item already escaped: the task instance's ids are escaped one by one in _where.
    meta = [
        _text(record.get("framework")),
        _text(f"{record['backend']} backend") if record.get("backend") else "",
        _text(format_duration(record.get("duration_seconds"))),
        _where(ref),
        _text(f"{record['restarts']} restart{'s' if record['restarts'] != 1 else ''}")
        if isinstance(record.get("restarts"), int) and record["restarts"] > 0 else "",
        _text("final record" if source == "recorded" else f"{source} state"),
    ]
    model_path = record.get("model_path")
    model = (f'<code class="model-path">{_text(model_path)}</code>' if model_path
             else '<p class="note">No model was logged.</p>')
    logs = record.get("logs") if isinstance(record.get("logs"), Mapping) else {}
    body = (
        f"<header><h1>{_text(name)}</h1><span class=\"badge s-{_text(state)}\">{_text(state)}</span>"
        f'<p class="meta">{"".join(f"<span>{item}</span>" for item in meta if item)}</p>'
        "</header>"
        f"{_progress(record.get('progress'))}"
        f"<h2>Replicas</h2>{_replicas(record.get('replicas') or [])}"
        '<div class="row">'
        f"<section><h2>Metrics</h2>{_metrics(record.get('metrics') or {})}</section>"
        f"<section><h2>Model</h2>{model}</section></div>"
        f"<h2>Metric history</h2>{_charts(record.get('history') or [])}"
        f"<h2>Replica logs (last lines)</h2>{_logs(logs if show_logs else None)}"
        f'<footer><a href="{escape(json_href)}">JSON record</a></footer>'
    )
    # A state that can still change reloads itself; the final record does not.
    return _document(f"{name} \u00b7 distributed job", body, refresh=source != "recorded")


def missing_page(ref: TaskInstanceRef, task_state: str | None) -> str:
    """No record (yet): says why, and reloads itself while the task instance may still produce one."""
    if task_state is None:
        message = "There is no such task instance."
    elif task_state in UNFINISHED:
        message = (f"The task is {escape(task_state)}: its job record appears when the job ends. "
                   f"This page reloads every {REFRESH_SECONDS} seconds.")
    else:
        message = (f"The task is {escape(task_state)} and left no job record: it did not start a job, "
                   "or it is not a DistributedTrainingOperator task.")
    body = f'<header><h1>No job record</h1><p class="meta">{_where(ref)}</p></header><p class="note">{message}</p>'
    return _document("No job record \u00b7 distributed job", body, refresh=task_state in UNFINISHED)


def error_page(status_code: int, message: str) -> str:
    """A refusal or error, readable inside the UI's frame (instead of a bare JSON body)."""
    body = f'<header><h1>{status_code}</h1></header><p class="note">{escape(message)}</p>'
    return _document(f"{status_code} \u00b7 distributed job", body)

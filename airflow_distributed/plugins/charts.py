"""Inline SVG line charts of a job's metric history (pure: values in, markup out; no script, no library).

Home-made on purpose: a charting library would need a script, and the job view is served with a policy
that forbids every script; a few static polylines are all the view needs.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from html import escape
from typing import Any

WIDTH, HEIGHT = 360, 150
# Room for the y labels on the left and the step labels below the plot.
LEFT, RIGHT, TOP, BOTTOM = 56, 12, 12, 24


def finite(value: Any) -> float | None:
    """``value`` as a finite float; None for anything else (text, NaN, infinity, an integer beyond any float)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    try:
        number = float(value)
    except OverflowError:
        return None
    return number if math.isfinite(number) else None


def series(history: Sequence[Mapping[str, Any]]) -> dict[str, list[tuple[float, float]]]:
    """``{metric: [(step, value), ...]}`` from history points; a point without a number for a metric is skipped."""
    out: dict[str, list[tuple[float, float]]] = {}
    for position, point in enumerate(history):
        if not isinstance(point, Mapping):
            continue
        step = finite(point.get("step"))
        x = float(position) if step is None else step
        for key, value in point.items():
            y = finite(value)
            if key != "step" and y is not None:
                out.setdefault(str(key), []).append((x, y))
    return out


def format_number(value: float) -> str:
    """Short, readable: 4 significant digits, integers without a point."""
    if not math.isfinite(value):
        return str(value)
    if value == int(value) and abs(value) < 1e15:
        return str(int(value))
    return f"{value:.4g}"


def format_integer(value: int) -> str:
    """An integer as ``format_number`` writes it, also one too large for a float (``1.235e+400``)."""
    if abs(value) < 10**15:
        return str(value)
    digits = str(abs(value))
    # Cut, not rounded: exact for any size, and 4 significant digits are what the view shows anyway.
    return f"{'-' if value < 0 else ''}{digits[0]}.{digits[1:4]}e+{len(digits) - 1}"


def _scale(value: float, low: float, high: float, start: float, length: float) -> float:
    return start + (value - low) / (high - low) * length if high > low else start + length / 2


def line_chart(title: str, points: Sequence[tuple[float, float]]) -> str:
    """An ``<svg>`` plotting ``points`` (step, value), labelled with the value range and the step range."""
    xs = [x for x, _ in points]
    ys = [y for _, y in points]
    x_low, x_high, y_low, y_high = min(xs), max(xs), min(ys), max(ys)
    plot_w, plot_h = WIDTH - LEFT - RIGHT, HEIGHT - TOP - BOTTOM
    # SVG's y grows downwards: the largest value goes at the top of the plot.
    coords = [
        (_scale(x, x_low, x_high, LEFT, plot_w), _scale(y, y_low, y_high, TOP + plot_h, -plot_h)) for x, y in points
    ]
    path = " ".join(f"{x:.1f},{y:.1f}" for x, y in coords)
    last_x, last_y = coords[-1]
    label = escape(title)
    return (
        f'<svg class="chart" viewBox="0 0 {WIDTH} {HEIGHT}" width="{WIDTH}" height="{HEIGHT}" role="img" '
        f'aria-label="{label}: {len(points)} points from step {format_number(x_low)} to {format_number(x_high)}">'
        f"<title>{label}</title>"
        f'<rect class="plot" x="{LEFT}" y="{TOP}" width="{plot_w}" height="{plot_h}"/>'
        f'<text class="tick" x="{LEFT - 6}" y="{TOP + 10}" text-anchor="end">{format_number(y_high)}</text>'
        f'<text class="tick" x="{LEFT - 6}" y="{TOP + plot_h}" text-anchor="end">{format_number(y_low)}</text>'
        f'<text class="tick" x="{LEFT}" y="{HEIGHT - 6}">step {format_number(x_low)}</text>'
        f'<text class="tick" x="{WIDTH - RIGHT}" y="{HEIGHT - 6}" text-anchor="end">{format_number(x_high)}</text>'
        f'<polyline class="line" points="{path}"/>'
        f'<circle class="last" cx="{last_x:.1f}" cy="{last_y:.1f}" r="3"/>'
        "</svg>"
    )


#: The waterfall's spans: (its class, its label, the phases that may open it, the phase that closes it). A span opens
#: at the latest known phase before its end, so an unknown phase merges two spans and is never drawn as a moment.
WATERFALL_SPANS = (
    ("wait", "waiting to be admitted", ("created",), "admitted"),
    ("wait", "waiting to be scheduled", ("admitted", "created"), "scheduled"),
    ("pull", "pulling the image", ("scheduled", "admitted", "created"), "image_pulled"),
    ("start", "starting", ("image_pulled", "scheduled", "admitted", "created"), "running"),
    ("rdzv", "to the rendezvous", ("running", "image_pulled", "scheduled", "admitted", "created"), "rendezvous"),
)
WATERFALL_ROWS = 16
ROW_H, LABEL_W, TOTAL_W = 18, 150, 60


def waterfall(rows: Sequence[tuple[str, Mapping[str, Any]]]) -> str:
    """An ``<svg>`` of startup phases: one row per ``(label, {phase: seconds from the job's creation | None})``, a bar
    per span between two known phases (a phase not known is not drawn), the seconds to the last known one at the
    right; each span's ``<title>`` names it and its seconds."""
    rows = list(rows)[:WATERFALL_ROWS]
    ends = [value for _, phases in rows for value in (finite(phases.get(key)) for key in phases) if value is not None]
    span_max = max([*ends, 0.0]) or 1.0
    plot_w = WIDTH + 140 - LABEL_W - TOTAL_W
    height = ROW_H * len(rows) + BOTTOM
    parts = [
        f'<svg class="chart waterfall" viewBox="0 0 {LABEL_W + plot_w + TOTAL_W} {height}" '
        f'width="{LABEL_W + plot_w + TOTAL_W}" height="{height}" role="img" '
        f'aria-label="startup phases of {len(rows)} rows over {format_number(round(span_max, 1))} s">'
    ]
    for position, (label, phases) in enumerate(rows):
        y = position * ROW_H
        parts.append(f'<text class="tick" x="{LABEL_W - 6}" y="{y + 13}" text-anchor="end">{escape(label)}</text>')
        for kind, name, starts, end in WATERFALL_SPANS:
            stop = finite(phases.get(end))
            begin = next((value for key in starts if (value := finite(phases.get(key))) is not None), None)
            if stop is None or begin is None:
                continue
            x = LABEL_W + max(0.0, begin) / span_max * plot_w
            width = max(1.0, (stop - begin) / span_max * plot_w)
            parts.append(f'<rect class="span {kind}" x="{x:.1f}" y="{y + 3}" width="{width:.1f}" height="{ROW_H - 6}">'
                         f"<title>{escape(name)}: {format_number(round(stop - begin, 3))} s</title></rect>")
        last = max((value for key in phases if (value := finite(phases.get(key))) is not None), default=None)
        text = "unknown" if finite(phases.get("rendezvous")) is None else f"{format_number(round(last or 0, 1))} s"
        parts.append(f'<text class="tick" x="{LABEL_W + plot_w + 4}" y="{y + 13}">{text}</text>')
    axis_y = ROW_H * len(rows) + 14
    parts.append(f'<text class="tick" x="{LABEL_W}" y="{axis_y}">0 s</text>')
    parts.append(f'<text class="tick" x="{LABEL_W + plot_w}" y="{axis_y}" text-anchor="end">'
                 f"{format_number(round(span_max, 1))} s</text></svg>")
    return "".join(parts)

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

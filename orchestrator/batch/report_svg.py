"""Inline SVG bar charts for the report, and the axis rule they follow (the sweep's chart files are the same charts).

Axes for counts start at zero and tick at whole numbers; an all-zero metric gets a 0..1 axis with
its bars drawn flat at zero (rather than a meaningless -0.06..0.06 range), so "nothing happened"
reads as exactly that.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from html import escape
from typing import Any

__all__ = ["SWEEP_METRICS", "axis_ticks", "bar_chart", "sweep_charts"]

SWEEP_METRICS: Mapping[str, tuple[str, bool]] = {
    "passed": ("Tasks passed", True),
    "checks_passed": ("Checks passed", True),
    "reflections_launch": ("Reflections launched", True),
    "reflections_merged": ("Reflections merged", True),
    "reflections_kept": ("Reflections kept (conflicts)", True),
    "compactions": ("Compactions", True),
    "tokens_main": ("Tokens, main agent", True),
    "tokens_sub": ("Tokens, subagents", True),
    "elapsed": ("Real wall time (s)", False),
}
"""Metric key in a run's report summary -> (title, whether it is a count)."""


def axis_ticks(values: Sequence[float], *, integer: bool, target: int = 5) -> list[float]:
    """Pure: ticks from 0 to a round top at or above every value (values below 0 are drawn at 0).
    Counts tick at whole numbers; all zeros give ``[0, 1]``."""
    top = max([0.0, *values])
    if top <= 0:
        return [0.0, 1.0]
    raw = top / target
    magnitude = 10 ** math.floor(math.log10(raw))
    step = next(m * magnitude for m in (1, 2, 2.5, 5, 10) if m * magnitude >= raw)
    if integer:
        step = max(1.0, math.ceil(step))
    count = math.ceil(top / step - 1e-9)
    return [float(round(i * step, 10)) for i in range(count + 1)]


def _fmt(value: float, integer: bool) -> str:
    if integer or float(value).is_integer():
        return f"{int(round(value)):,}"
    return f"{value:.2f}"


def bar_chart(labels: Sequence[str], values: Sequence[float], title: str, *, integer: bool) -> str:
    """One bar per label with its value written above it; an SVG element as text."""
    ticks = axis_ticks(values, integer=integer)
    top = ticks[-1]
    bar_w, gap, left, right, height, plot_top, plot_h = 56, 20, 56, 16, 236, 40, 150
    width = max(left + right + max(1, len(labels)) * (bar_w + gap), left + right + 8 * len(title))
    base = plot_top + plot_h
    parts = [
        f'<svg xmlns="http://www.w3.org/2000/svg" class="chart" role="img" width="{width}" height="{height}" '
        f'viewBox="0 0 {width} {height}"><title>{escape(title)}</title>',
        f'<text x="{left}" y="20" class="chart-title">{escape(title)}</text>',
    ]
    for tick in ticks:
        y = base - plot_h * tick / top
        parts.append(f'<line x1="{left}" x2="{width - right}" y1="{y:.1f}" y2="{y:.1f}" class="grid"/>')
        parts.append(f'<text x="{left - 6}" y="{y + 4:.1f}" text-anchor="end" class="tick">{_fmt(tick, integer)}</text>')
    for i, (label, value) in enumerate(zip(labels, values, strict=True)):
        x = left + gap / 2 + i * (bar_w + gap)
        h = plot_h * max(0.0, value) / top
        parts.append(
            f'<rect x="{x:.1f}" y="{base - h:.1f}" width="{bar_w}" height="{max(h, 0.0):.1f}" class="bar">'
            f"<title>{escape(label)}: {_fmt(value, integer)}</title></rect>"
        )
        parts.append(f'<text x="{x + bar_w / 2:.1f}" y="{base - h - 4:.1f}" text-anchor="middle" class="value">'
                     f"{_fmt(value, integer)}</text>")
        parts.append(f'<text x="{x + bar_w / 2:.1f}" y="{base + 16}" text-anchor="middle" class="label">'
                     f"{escape(label)}</text>")
    parts.append(f'<line x1="{left}" x2="{left}" y1="{plot_top}" y2="{base}" class="axis"/>')
    parts.append("</svg>")
    return "".join(parts)


def sweep_charts(runs: Sequence[tuple[str, Mapping[str, Any]]]) -> list[dict[str, str]]:
    """One chart per sweep metric, from each setting's report summary."""
    labels = [label for label, _ in runs]
    charts = []
    for key, (title, integer) in SWEEP_METRICS.items():
        values = [float(summary.get(key) or 0) for _, summary in runs]
        charts.append({"metric": key, "title": title, "svg": bar_chart(labels, values, title, integer=integer)})
    return charts

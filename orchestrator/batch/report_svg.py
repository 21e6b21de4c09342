"""Inline SVG charts for the report (bars per metric, the sweep's quality-cost Pareto chart), and the
axis rule they follow (the sweep's chart files are the same charts).

Axes for counts start at zero and tick at whole numbers; an all-zero metric gets a 0..1 axis with
its bars drawn flat at zero (rather than a meaningless -0.06..0.06 range), so "nothing happened"
reads as exactly that.

Pareto chart labels: each label is a monospace text of known width (``_CHAR_W`` per character at
``_FONT`` px), placed at the first of a fixed list of positions around its point (right, left,
above, below, then further out) whose box overlaps no label placed before it, no point marker
and stays inside the plot; so two settings at the same quality and nearly the same cost still
get readable labels (tests/batch/test_report.py checks the boxes in Chromium).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from html import escape
from typing import Any

__all__ = ["SWEEP_METRICS", "axis_ticks", "bar_chart", "label_boxes", "pareto_chart", "sweep_charts"]

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


_BAR_CHAR_W = 6.8
"""Monospace advance at 11 px (0.6 em) with a little room: the width a bar label's character takes."""


def _fmt(value: float, integer: bool) -> str:
    if integer or float(value).is_integer():
        return f"{int(round(value)):,}"
    return f"{value:.2f}"


def bar_chart(labels: Sequence[str], values: Sequence[float], title: str, *, integer: bool) -> str:
    """One bar per label with its value written above it; an SVG element as text."""
    ticks = axis_ticks(values, integer=integer)
    top = ticks[-1]
    bar_w, right, height, plot_top, plot_h = 56, 16, 236, 40, 150
    left = max(56, round(max(len(_fmt(t, integer)) for t in ticks) * 6.5 + 14))  # room for the widest tick
    # each bar's slot is as wide as its longest label (monospace, _BAR_CHAR_W a character), so labels never meet
    gap = max(20.0, max((len(label) for label in labels), default=0) * _BAR_CHAR_W + 10 - bar_w)
    width = round(max(left + right + max(1, len(labels)) * (bar_w + gap), left + right + 8 * len(title)))
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
        parts.append(f'<text x="{x + bar_w / 2:.1f}" y="{base + 16}" text-anchor="middle" class="label" '
                     f'font-family="monospace" font-size="11">{escape(label)}</text>')
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


_FONT = 12
_CHAR_W = 7.3
"""Monospace advance at ``_FONT`` px (0.6 em) with a little room, so an estimated box holds the glyphs."""
_LABEL_H = 15.0
_OFFSETS = (
    (8, -4), (-8, -4), (0, -12), (0, 20), (8, -20), (-8, -20), (8, 12), (-8, 12),
    (8, -36), (-8, -36), (8, 28), (-8, 28), (8, -52), (-8, -52), (8, 44), (-8, 44),
)
"""Label anchor offsets from its point, tried in order: (dx, baseline dy). Negative dx anchors the
label's end at the point (text to the left); 0 centres it."""

_Box = tuple[float, float, float, float]


def _box(x: float, y: float, dx: float, dy: float, width: float) -> _Box:
    left = x + dx if dx > 0 else (x + dx - width if dx < 0 else x - width / 2)
    top = y + dy - _FONT
    return (left, top, left + width, top + _LABEL_H)


def _overlaps(a: _Box, b: _Box) -> bool:
    return a[0] < b[2] and b[0] < a[2] and a[1] < b[3] and b[1] < a[3]


def label_boxes(points: Sequence[tuple[float, float]], labels: Sequence[str], area: _Box) -> list[tuple[float, float, str]]:
    """Pure: for each point and label, where its text goes: ``(x, y, anchor)`` (SVG ``text-anchor``),
    by the module docstring's rule; the last resort (every position taken) is the first one."""
    markers = [(x - 5, y - 5, x + 5, y + 5) for x, y in points]
    placed: list[_Box] = []
    out: list[tuple[float, float, str]] = []
    for (x, y), label in zip(points, labels, strict=True):
        width = len(label) * _CHAR_W
        choice = None
        for dx, dy in _OFFSETS:
            box = _box(x, y, dx, dy, width)
            inside = box[0] >= area[0] and box[2] <= area[2] and box[1] >= area[1] and box[3] <= area[3]
            if inside and not any(_overlaps(box, o) for o in placed + markers):
                choice = (dx, dy, box)
                break
        if choice is None:
            dx, dy = _OFFSETS[0]
            choice = (dx, dy, _box(x, y, dx, dy, width))
        dx, dy, box = choice
        placed.append(box)
        out.append((x + dx, y + dy, "start" if dx > 0 else ("end" if dx < 0 else "middle")))
    return out


def _tokens_label(value: float) -> str:
    return f"{value / 1e6:.1f}M" if value >= 1e6 else (f"{value / 1e3:.0f}k" if value >= 1e3 else f"{value:.0f}")


def pareto_chart(rows: Sequence[Mapping[str, Any]], front: Sequence[str], *, cost_key: str = "tokens") -> str:
    """Quality (with its 95% interval as a whisker) against cost, one point per setting; the front's
    points filled and joined. An SVG element as text."""
    width, height = 640, 360
    left, right, top, bottom = 64, 24, 40, 48
    area = (float(left), float(top), float(width - right), float(height - bottom))
    costs = [float(r.get(cost_key) or 0) for r in rows]
    xticks = axis_ticks(costs, integer=cost_key == "tokens")
    xmax = xticks[-1]
    plot_w, plot_h = width - left - right, height - top - bottom

    def sx(v: float) -> float:
        return left + 24 + (plot_w - 48) * v / xmax

    def sy(v: float) -> float:
        return top + plot_h * (1 - v)

    title = f"Quality against {'cost (USD)' if cost_key == 'cost' else 'tokens'}"
    parts = [
        f'<svg xmlns="http://www.w3.org/2000/svg" class="chart pareto" role="img" width="{width}" height="{height}" '
        f'viewBox="0 0 {width} {height}"><title>{escape(title)}</title>',
        f'<text x="{left}" y="20" class="chart-title">{escape(title)} · filled: Pareto front</text>',
    ]
    for level in (0.0, 0.25, 0.5, 0.75, 1.0):
        y = sy(level)
        parts.append(f'<line x1="{left}" x2="{width - right}" y1="{y:.1f}" y2="{y:.1f}" class="grid"/>')
        parts.append(f'<text x="{left - 6}" y="{y + 4:.1f}" text-anchor="end" class="tick">{level:.2f}</text>')
    for tick in xticks:
        x = sx(tick)
        text = f"${tick:.2f}" if cost_key == "cost" else _tokens_label(tick)
        parts.append(f'<text x="{x:.1f}" y="{height - bottom + 16}" text-anchor="middle" class="tick">{text}</text>')
    parts.append(f'<text x="{left + plot_w / 2:.1f}" y="{height - 8}" text-anchor="middle" class="tick">'
                 f"{'cost' if cost_key == 'cost' else 'tokens (main + subagents)'}</text>")
    parts.append(f'<line x1="{left}" x2="{left}" y1="{top}" y2="{height - bottom}" class="axis"/>')
    parts.append(f'<line x1="{left}" x2="{width - right}" y1="{height - bottom}" y2="{height - bottom}" class="axis"/>')
    points: list[tuple[float, float, Mapping[str, Any]]] = []
    for row, cost in zip(rows, costs, strict=True):
        q = row.get("quality") or {"mean": 0.0, "low": 0.0, "high": 0.0}
        points.append((sx(cost), sy(float(q["mean"])), q))
    on_front = sorted((p[0], p[1]) for p, r in zip(points, rows, strict=True) if r["setting"] in front)
    if len(on_front) > 1:
        path = " ".join(f"{x:.1f},{y:.1f}" for x, y in on_front)
        parts.append(f'<polyline points="{path}" class="front" fill="none"/>')
    drawn = sorted(zip(points, rows, strict=True), key=lambda pr: pr[1]["setting"] in front)  # the front on top
    for (x, y, q), row in drawn:
        parts.append(f'<line x1="{x:.1f}" x2="{x:.1f}" y1="{sy(float(q["low"])):.1f}" y2="{sy(float(q["high"])):.1f}" class="whisker"/>')
        filled = row["setting"] in front
        parts.append(
            f'<circle cx="{x:.1f}" cy="{y:.1f}" r="5" class="point{" front" if filled else ""}">'
            f'<title>{escape(str(row["setting"]))}: quality {float(q["mean"]):.3f} [{float(q["low"]):.3f}, '
            f'{float(q["high"]):.3f}], {escape(_tokens_label(float(row.get("tokens") or 0)))} tokens</title></circle>'
        )
    labels = [str(r["setting"]) for r in rows]
    for (lx, ly, anchor), label in zip(label_boxes([(x, y) for x, y, _ in points], labels, area), labels, strict=True):
        parts.append(
            f'<text x="{lx:.1f}" y="{ly:.1f}" text-anchor="{anchor}" class="point-label" '
            f'font-family="monospace" font-size="{_FONT}">{escape(label)}</text>'
        )
    parts.append("</svg>")
    return "".join(parts)

"""One PNG bar chart per metric of a sweep (matplotlib's object API with the Agg canvas: no pyplot,
no global backend switch, safe to call from a worker thread).

The y axis follows the report's rule (``report_svg.axis_ticks``): it starts at zero, counts tick at
whole numbers, and an all-zero metric gets a 0..1 axis instead of matplotlib's -0.06..0.06."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from orchestrator.batch.report_svg import axis_ticks

__all__ = ["chart_figure", "write_charts"]


def chart_figure(labels: Sequence[str], values: Sequence[float], title: str, *, xlabel: str = "setting") -> Any:
    """One bar chart as a matplotlib ``Figure`` (drawn on an Agg canvas)."""
    # lazy: matplotlib is the slowest import of a run and only charts use it
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    integer = all(float(v).is_integer() for v in values)
    ticks = axis_ticks(values, integer=integer)
    figure = Figure(figsize=(max(4.0, 1.2 * len(labels) + 2), 3.6), dpi=100)
    FigureCanvasAgg(figure)
    axes = figure.add_subplot()
    bars = axes.bar(list(labels), list(values), color="#4C72B0")
    axes.bar_label(bars, labels=[f"{v:g}" for v in values], padding=2, fontsize=8)
    axes.set_title(title)
    axes.set_xlabel(xlabel)
    axes.set_yticks(ticks)
    axes.set_ylim(0, ticks[-1] * 1.12)
    if integer:
        axes.set_yticklabels([f"{int(t):,}" for t in ticks])
    axes.tick_params(axis="x", labelrotation=20, labelsize=8)
    figure.tight_layout()
    return figure


def write_charts(
    rows: Sequence[Mapping[str, Any]], metrics: Mapping[str, str], out_dir: Path, *, label_key: str = "setting"
) -> list[Path]:
    """Write ``<metric>.png`` for each ``metric -> title`` (blocking); returns the paths."""
    out_dir.mkdir(parents=True, exist_ok=True)
    labels = [str(row[label_key]) for row in rows]
    written: list[Path] = []
    for metric, title in metrics.items():
        values = [float(row.get(metric) or 0) for row in rows]
        figure = chart_figure(labels, values, title, xlabel=label_key)
        path = out_dir / f"{metric}.png"
        figure.savefig(path)
        written.append(path)
    return written

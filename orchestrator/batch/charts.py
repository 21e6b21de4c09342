"""One PNG bar chart per metric of a sweep (matplotlib's object API with the Agg canvas: no pyplot,
no global backend switch, safe to call from a worker thread)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

__all__ = ["write_charts"]


def write_charts(
    rows: Sequence[Mapping[str, Any]], metrics: Mapping[str, str], out_dir: Path, *, label_key: str = "setting"
) -> list[Path]:
    """Write ``<metric>.png`` for each ``metric -> title`` (blocking); returns the paths."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure
    from matplotlib.ticker import MaxNLocator

    out_dir.mkdir(parents=True, exist_ok=True)
    labels = [str(row[label_key]) for row in rows]
    written: list[Path] = []
    for metric, title in metrics.items():
        values = [float(row.get(metric) or 0) for row in rows]
        figure = Figure(figsize=(max(4.0, 1.2 * len(labels) + 2), 3.6), dpi=100)
        FigureCanvasAgg(figure)
        axes = figure.add_subplot()
        bars = axes.bar(labels, values, color="#4C72B0")
        axes.bar_label(bars, labels=[f"{v:g}" for v in values], padding=2, fontsize=8)
        axes.set_title(title)
        axes.set_xlabel(label_key)
        axes.margins(y=0.15)
        if all(v.is_integer() for v in values):
            axes.yaxis.set_major_locator(MaxNLocator(integer=True))
        axes.tick_params(axis="x", labelrotation=20, labelsize=8)
        figure.tight_layout()
        path = out_dir / f"{metric}.png"
        figure.savefig(path)
        written.append(path)
    return written

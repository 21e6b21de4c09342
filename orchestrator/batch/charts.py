"""One SVG bar chart per metric of a sweep, written as files beside ``comparison.md``.

They are the report's charts (``report_svg.bar_chart``: the same axis rule, zero-based, whole-number
ticks for counts, 0..1 for a metric that is zero everywhere) with the report's chart styles inlined,
so a file opens on its own in a browser or an image viewer. Drawing them with matplotlib as PNGs
was a second renderer of the same charts and a ~170 MB dependency; a PNG, where one is wanted, is a
conversion of these files.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from orchestrator.batch.report_svg import bar_chart

__all__ = ["chart_svg", "write_charts"]

_STYLE = (
    "<style>"
    "text{font-family:system-ui,sans-serif}"
    ".chart-title{font-weight:600;font-size:13px;fill:#1f2430}"
    ".grid{stroke:#e6e9ee}.axis{stroke:#9aa3af}.bar{fill:#4C72B0}"
    ".tick,.label,.value{font-size:11px;fill:#394150}"
    "</style>"
)


def chart_svg(labels: Sequence[str], values: Sequence[float], title: str) -> str:
    """A standalone SVG document of one bar chart (counts when every value is whole)."""
    chart = bar_chart(labels, values, title, integer=all(float(v).is_integer() for v in values))
    opening, rest = chart.split(">", 1)
    return f'<?xml version="1.0" encoding="UTF-8"?>\n{opening}>{_STYLE}{rest}\n'


def write_charts(
    rows: Sequence[Mapping[str, Any]], metrics: Mapping[str, str], out_dir: Path, *, label_key: str = "setting"
) -> list[Path]:
    """Write ``<metric>.svg`` for each ``metric -> title`` (blocking); returns the paths."""
    out_dir.mkdir(parents=True, exist_ok=True)
    labels = [str(row[label_key]) for row in rows]
    written: list[Path] = []
    for metric, title in metrics.items():
        values = [float(row.get(metric) or 0) for row in rows]
        path = out_dir / f"{metric}.svg"
        path.write_text(chart_svg(labels, values, title), encoding="utf-8")
        written.append(path)
    return written

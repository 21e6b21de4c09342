"""Chart axes: counts tick at whole numbers from zero; an all-zero metric is drawn on 0..1."""

from __future__ import annotations

import re
import xml.etree.ElementTree as ET
from pathlib import Path

from orchestrator.batch.charts import write_charts
from orchestrator.batch.report_svg import axis_ticks, bar_chart


def test_axis_ticks_for_counts_zeros_and_seconds() -> None:
    assert axis_ticks([0, 0, 0], integer=True) == [0.0, 1.0]
    assert axis_ticks([3, 1], integer=True) == [0.0, 1.0, 2.0, 3.0]
    assert axis_ticks([7, 7], integer=True) == [0.0, 2.0, 4.0, 6.0, 8.0]
    assert axis_ticks([15_095, 15_115], integer=True) == [0.0, 5000.0, 10000.0, 15000.0, 20000.0]
    assert axis_ticks([1.11, 1.49], integer=False) == [0.0, 0.5, 1.0, 1.5]
    for values in ([1], [2, 9], [123, 4], [0.3], [57.2]):
        ticks = axis_ticks(values, integer=True)
        assert ticks[0] == 0 and ticks[-1] >= max(values) and all(t.is_integer() for t in ticks)
        assert len(ticks) <= 7


def test_sweep_chart_files_are_standalone_svg_with_the_reports_axes(tmp_path: Path) -> None:
    rows = [{"setting": "off", "kept": 0, "merges": 3, "wall": 1.11}, {"setting": "step-count-2", "kept": 0, "merges": 1, "wall": 1.49}]
    paths = write_charts(rows, {"kept": "Reflections kept", "merges": "Merges", "wall": "Wall (s)"}, tmp_path / "charts")
    assert [p.name for p in paths] == ["kept.svg", "merges.svg", "wall.svg"]
    ns = "{http://www.w3.org/2000/svg}"
    for path in paths:
        root = ET.fromstring(path.read_text(encoding="utf-8"))  # well-formed XML, a document of its own
        assert root.tag == f"{ns}svg" and root.find(f"{ns}style") is not None
    ticks = {p.stem: re.findall(r'class="tick">([^<]*)<', p.read_text(encoding="utf-8")) for p in paths}
    assert ticks == {"kept": ["0", "1"], "merges": ["0", "1", "2", "3"], "wall": ["0", "0.50", "1", "1.50"]}


def test_svg_chart_labels_every_bar_and_tick() -> None:
    svg = bar_chart(["off", "<b>"], [0, 0], "Conflicts", integer=True)
    assert svg.startswith("<svg") and "&lt;b&gt;" in svg and "<b>" not in svg
    assert re.findall(r'class="tick">([^<]*)<', svg) == ["0", "1"]
    assert re.findall(r'class="value">([^<]*)<', svg) == ["0", "0"]

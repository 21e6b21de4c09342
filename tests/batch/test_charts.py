"""Chart axes: counts tick at whole numbers from zero; an all-zero metric is drawn on 0..1."""

from __future__ import annotations

import re

from orchestrator.batch.charts import chart_figure
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


def test_png_axis_is_zero_based_with_integer_ticks() -> None:
    zeros = chart_figure(["off", "step-count-2"], [0.0, 0.0], "Reflections kept").axes[0]
    assert zeros.get_ylim()[0] == 0 and zeros.get_ylim()[1] >= 1
    assert [t for t in zeros.get_yticks() if t <= 1] == [0, 1]
    counts = chart_figure(["a", "b"], [3.0, 1.0], "Reflections").axes[0]
    assert list(counts.get_yticks()) == [0, 1, 2, 3]
    assert [t.get_text() for t in counts.get_yticklabels()] == ["0", "1", "2", "3"]


def test_svg_chart_labels_every_bar_and_tick() -> None:
    svg = bar_chart(["off", "<b>"], [0, 0], "Conflicts", integer=True)
    assert svg.startswith("<svg") and "&lt;b&gt;" in svg and "<b>" not in svg
    assert re.findall(r'class="tick">([^<]*)<', svg) == ["0", "1"]
    assert re.findall(r'class="value">([^<]*)<', svg) == ["0", "0"]

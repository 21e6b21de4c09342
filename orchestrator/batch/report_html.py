"""``report.html``: the gathered data embedded into one self-contained page (styles, script and SVG
inline; a Content-Security-Policy of ``default-src 'none'`` so the page cannot fetch anything even
by accident, which also makes it safe to open from a CI artifact).

The data goes in ``<script type="application/json">`` blocks: the index is parsed at load, each
task's detail only when it is opened. ``<`` ``>`` and ``&`` are written as JSON escapes, so no
text from a transcript can end a script block early.
"""

from __future__ import annotations

import json
import os
from datetime import UTC, datetime
from html import escape
from importlib.resources import files
from pathlib import Path
from typing import Any

from orchestrator.batch.report_data import ReportData, gather

__all__ = ["REPORT_FILE", "render_report", "write_report"]

REPORT_FILE = "report.html"


def _script_json(value: Any) -> str:
    text = json.dumps(value, ensure_ascii=False, separators=(",", ":"), default=str)
    return text.replace("&", "\\u0026").replace("<", "\\u003c").replace(">", "\\u003e")


def render_report(data: ReportData, *, generated_at: str | None = None) -> str:
    """Pure: the page's HTML."""
    template = files("orchestrator.batch").joinpath("report_template.html").read_text(encoding="utf-8")
    index = {**data.index, "generated_at": generated_at or datetime.now(UTC).strftime("%Y-%m-%d %H:%M:%S UTC")}
    blocks = [f'<script type="application/json" id="report-index">{_script_json(index)}</script>']
    blocks.extend(
        f'<script type="application/json" id="task-{n}">{_script_json(detail)}</script>'
        for n, detail in enumerate(data.details)
    )
    title = escape(str(index.get("title", "reverie report")))
    return template.replace("__TITLE__", title, 1).replace("__DATA__", "\n".join(blocks), 1)


def write_report(run_dir: Path, *, out: Path | None = None, workers: int = 4) -> Path:
    """Gather ``run_dir`` (a run or a sweep) and write its report atomically (blocking)."""
    target = out or run_dir / REPORT_FILE
    html = render_report(gather(run_dir, workers=workers))
    tmp = target.with_name(f".{target.name}.{os.getpid()}.tmp")
    tmp.write_text(html, encoding="utf-8")
    os.replace(tmp, target)
    return target

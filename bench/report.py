"""How fast a big ``report.html`` opens in headless Chromium (P9: 500 tasks within 2 s).

Runs ``examples/suite.jsonl`` once (or takes ``--run-dir``), gathers its report data, and scales it to
``--tasks`` rows by repeating the real tasks under new ids (each copy keeps its full transcript,
memory diff and timeline, so the page is as heavy as a real run of that size). For each size the
table shows the HTML size, the time to write it from gathered data, and medians over ``--repeats``
fresh page loads: navigation start until the table is rendered (``body[data-ready]``, measured
inside the page with ``performance.now()``), and the time to open one task's detail (click to laid-out page, also measured in the page). Ratios are
against the real run.

    .venv/bin/python bench/report.py [--tasks 500] [--repeats 5] [--run-dir RUN_DIR]
"""

from __future__ import annotations

import argparse
import copy
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from orchestrator.batch.report_data import ReportData, gather
from orchestrator.batch.report_html import render_report

_ROOT = Path(__file__).resolve().parents[1]
_ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync"]


def _scaled(data: ReportData, tasks: int) -> ReportData:
    run = data.index["runs"][0]
    rows, details = [], []
    for n in range(tasks):
        source = run["rows"][n % len(run["rows"])]
        row = copy.deepcopy(source)
        row["id"] = source["id"] if n < len(run["rows"]) else f"{source['id']}-{n // len(run['rows'])}"
        row["n"] = n
        rows.append(row)
        details.append(data.details[source["n"]])
    index = copy.deepcopy(data.index)
    index["runs"][0]["rows"] = rows
    index["runs"][0]["summary"]["tasks"] = tasks
    return ReportData(index, tuple(details))


def _loads(html_path: Path, repeats: int, open_id: str) -> tuple[list[float], list[float]]:
    from playwright.sync_api import sync_playwright

    ready, opened = [], []
    with sync_playwright() as pw:
        for _ in range(repeats):
            with tempfile.TemporaryDirectory() as profile:
                context = pw.chromium.launch_persistent_context(
                    profile, executable_path="/usr/bin/chromium", headless=True, args=_ARGS
                )
                page = context.new_page()
                page.goto(html_path.as_uri())
                page.wait_for_selector("body[data-ready='1']")
                ready.append(page.evaluate("window.reportReadyAt") / 1000)
                took = page.evaluate(
                    """id => { const row = document.querySelector(`tr.task-row[data-task-id="${id}"]`);
                               const t = performance.now(); row.click(); document.body.offsetHeight;
                               return performance.now() - t; }""",
                    open_id,
                )
                page.wait_for_selector(f".sections[data-task-id='{open_id}'] .transcript")
                opened.append(took / 1000)
                context.close()
    return ready, opened


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tasks", type=int, default=500)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--run-dir", type=Path)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        run_dir = args.run_dir
        if run_dir is None:
            run_dir = Path(tmp) / "run"
            subprocess.run([sys.executable, "-m", "orchestrator", "run", str(_ROOT / "examples" / "suite.jsonl"),
                            "-j", "4", "-q", "--out", str(run_dir)], check=False, capture_output=True, cwd=_ROOT)
        started = time.perf_counter()
        data = gather(run_dir)
        gathered = time.perf_counter() - started
        real = len(data.index["runs"][0]["rows"])
        figures: list[dict[str, Any]] = []
        for size in (real, args.tasks):
            scaled = data if size == real else _scaled(data, size)
            started = time.perf_counter()
            html = render_report(scaled)
            path = Path(tmp) / f"report-{size}.html"
            path.write_text(html, encoding="utf-8")
            written = time.perf_counter() - started
            open_id = scaled.index["runs"][0]["rows"][-1]["id"]
            ready, opened = _loads(path, args.repeats, open_id)
            figures.append({"tasks": size, "mb": len(html.encode()) / 1e6, "write": written,
                            "ready": statistics.median(ready), "worst": max(ready), "open": statistics.median(opened)})
    print(f"gathered {real} real tasks from {run_dir} in {gathered:.2f} s")
    print(f"{'tasks':>6} {'html MB':>8} {'write s':>8} {'ready s (median)':>17} {'ready s (worst)':>16} "
          f"{'open task s':>12} {'ready ratio':>12}")
    for f in figures:
        print(f"{f['tasks']:>6} {f['mb']:>8.2f} {f['write']:>8.3f} {f['ready']:>17.3f} {f['worst']:>16.3f} "
              f"{f['open']:>12.3f} {f['ready'] / figures[0]['ready']:>11.2f}x")
    verdict = "within" if figures[-1]["worst"] <= 2.0 else "OVER"
    print(f"{args.tasks} tasks: worst load {figures[-1]['worst']:.3f} s, {verdict} the 2 s budget")


if __name__ == "__main__":
    main()

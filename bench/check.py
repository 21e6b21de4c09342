"""``make bench-check``: run the benches that guard speed and fail when a figure crosses its mark in
``bench/thresholds.toml``.

Speed is measured here, on every change (CI runs it), and never asserted in the unit suite: a unit
test that counts SQLite jobs or pins an import list keeps a second code path alive for a gain
under 1% and fails for reasons unrelated to what it names. Each bench runs as its own process
(as a user runs it) and writes its figures as JSON; this script only compares. It also runs the
tests of the bench tooling itself (``bench/tests``), which start sleepers and process trees and
belong with the benches rather than in ``make unit``.

The marks hold on a shared, loaded machine (``.ci/run`` gates on them): each is a CPU time over the
CPU time of the reference process (``thresholds.REFERENCE``) measured beside it in this invocation,
the median over repetitions. ``startup.py`` pairs the reference with every probe itself; around
``turn.py`` and each ``scale.py`` run this script measures the reference before and after and
divides by their mean. Wall-clock figures (efficiency, first byte) are printed by the benches, with
their verdicts for a quiet machine, and are not marks here: on two cores shared with other work they
measure the other work.

    .venv/bin/python bench/check.py [--skip-tests] [--repeats 3]
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
from functools import partial
from pathlib import Path
from typing import Any

from thresholds import THRESHOLDS_FILE, load_thresholds, reference_cpu

_BENCH = Path(__file__).resolve().parent
_PY = sys.executable


def _run(script: str, args: list[str], out: Path) -> Any:
    """Run one bench with ``--json out``; its own table goes to our output as it is printed."""
    cmd = [_PY, str(_BENCH / script), *args, "--json", str(out)]
    print(f"\n$ {' '.join(cmd[1:])}", flush=True)
    done = subprocess.run(cmd, check=False)
    if not out.exists():
        raise SystemExit(f"bench-check: {script} wrote no figures (exit {done.returncode})")
    figures = json.loads(out.read_text())
    out.unlink()
    return figures


def _first_row(n: int, out: Path) -> Any:
    return _run("scale.py", [str(n)], out)[0]


class _Reference:
    """The reference's CPU measured again after every bench run; a run is divided by the mean of the
    measurements just before and just after it."""

    def __init__(self) -> None:
        self.seen: list[float] = []
        self.last = 0.0
        self.refresh()

    def refresh(self) -> None:
        self.last = reference_cpu()
        self.seen.append(self.last)

    def around(self, run: Any) -> tuple[Any, float]:
        before = self.last
        result = run()
        self.refresh()
        return result, (before + self.last) / 2 * 1000


def _mark(name: str, ratios: list[float], limit: float) -> tuple[str, bool]:
    value = statistics.median(ratios)
    spread = f" (runs {', '.join(f'{r:.4g}' for r in ratios)})" if len(ratios) > 1 else ""
    return f"{name}: {value:.4g} (mark <= {limit:g}){spread}", value <= limit


def main() -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--skip-tests", action="store_true", help="only the benches, not bench/tests")
    parser.add_argument("--repeats", type=int, default=3, help="runs of turn.py and of scale.py N=64 (median)")
    parser.add_argument(
        "--benches", default="startup,turn,scale", help="which to run, comma-separated (default: all three)"
    )
    args = parser.parse_args()
    marks = load_thresholds()
    lines: list[tuple[str, bool]] = []
    if not args.skip_tests:
        tests = subprocess.run([_PY, "-m", "pytest", "-q", str(_BENCH / "tests")], check=False)
        lines.append(("bench/tests", tests.returncode == 0))
    with tempfile.TemporaryDirectory(prefix="reverie-bench-check-") as tmp:
        out = Path(tmp) / "figures.json"
        benches = set(args.benches.split(","))
        if "startup" in benches:
            startup = _run("startup.py", ["--repeats", "7"], out)
            mark = marks["startup"]
            lines.append(_mark("startup: --version CPU / python -c pass CPU", [startup["--version CPU / python -c pass CPU"]], mark["max_version_cpu_ratio"]))
            lines.append(_mark("startup: chat -p CPU / reference CPU", [startup["chat -p CPU / import openai CPU"]], mark["max_chat_cpu_ratio"]))
        reference = _Reference()  # startup.py pairs its probes with the reference itself
        if "turn" in benches:
            turn = [reference.around(lambda: _run("turn.py", ["--turns", "40"], out)) for _ in range(args.repeats)]
            lines.append(_mark("turn: chat turn CPU / reference CPU", [f["chat"]["cpu_ms"] / ref for f, ref in turn], marks["turn"]["max_chat_cpu_ratio"]))
        for n, repeats in ((64, args.repeats), (1000, 1)) if "scale" in benches else ():
            mark = marks["scale"][str(n)]
            runs = [reference.around(partial(_first_row, n, out)) for _ in range(repeats)]
            if mark.get("all_pass"):
                failed = [row["n"] - row["passed"] for row, _ in runs if row["passed"] != row["n"]]
                lines.append((f"scale N={n}: every task passes" + (f" ({failed} did not)" if failed else ""), not failed))
            lines.append(_mark(f"scale N={n}: CPU per turn / reference CPU", [row["cpu_per_turn_ms"] / ref for row, ref in runs], mark["max_cpu_per_turn_ratio"]))
            if "max_tree_rss_mib" in mark:
                rss = max(row["tree_rss_mib"] for row, _ in runs)
                lines.append((f"scale N={n}: tree RSS {rss:.0f} MiB (mark <= {mark['max_tree_rss_mib']} MiB)", rss <= mark["max_tree_rss_mib"]))
    seen = reference.seen
    print(f"\nbench-check against {THRESHOLDS_FILE.relative_to(_BENCH.parent)} "
          f"(reference CPU {min(seen) * 1000:.0f}-{max(seen) * 1000:.0f} ms over {len(seen)} measurements):")
    for line, ok in lines:
        print(f"  {'ok    ' if ok else 'MISSED'} {line}")
    missed = sum(not ok for _, ok in lines)
    print("  every mark met" if not missed else f"  {missed} missed")
    return 1 if missed else 0


if __name__ == "__main__":
    raise SystemExit(main())

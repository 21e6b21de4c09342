"""``make bench-check``: run the benches that guard speed and fail when a figure crosses its mark in
``bench/thresholds.toml``.

Speed is measured here, on every change (CI runs it), and never asserted in the unit suite: a unit
test that counts SQLite jobs or pins an import list keeps a second code path alive for a gain
under 1% and fails for reasons unrelated to what it names. Each bench runs as its own process
(as a user runs it) and writes its figures as JSON; this script only compares. It also runs the
tests of the bench tooling itself (``bench/tests``), which start sleepers and process trees and
belong with the benches rather than in ``make unit``.

    .venv/bin/python bench/check.py [--skip-tests]
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

from thresholds import THRESHOLDS_FILE, load_thresholds

_BENCH = Path(__file__).resolve().parent
_PY = sys.executable


def _run(script: str, args: list[str], out: Path) -> Any:
    """Run one bench with ``--json out``; its own table goes to our output as it is printed."""
    cmd = [_PY, str(_BENCH / script), *args, "--json", str(out)]
    print(f"\n$ {' '.join(cmd[1:])}", flush=True)
    done = subprocess.run(cmd, check=False)
    if not out.exists():
        raise SystemExit(f"bench-check: {script} wrote no figures (exit {done.returncode})")
    return json.loads(out.read_text())


def _scale_misses(rows: list[dict[str, Any]], marks: dict[str, Any]) -> list[str]:
    misses = []
    for row in rows:
        mark = marks[str(row["n"])]
        name = f"scale N={row['n']}"
        if mark.get("all_pass") and row["passed"] != row["n"]:
            misses.append(f"{name}: {row['n'] - row['passed']} of {row['n']} tasks did not pass")
        if row["efficiency"] < mark.get("min_efficiency", 0.0):
            misses.append(f"{name}: efficiency {row['efficiency']:.3f} < {mark['min_efficiency']}")
        if row["tree_rss_mib"] > mark.get("max_tree_rss_mib", float("inf")):
            misses.append(f"{name}: tree RSS {row['tree_rss_mib']:.0f} MiB > {mark['max_tree_rss_mib']} MiB")
    return misses


def _startup_misses(medians: dict[str, float], marks: dict[str, Any]) -> list[str]:
    misses = []
    first = medians["chat -p: reply's first byte"]
    if first > marks["max_first_byte_s"]:
        misses.append(f"startup: chat -p first byte {first:.3f} s > {marks['max_first_byte_s']} s")
    ratio = medians["reverie --version"] / medians["python -c pass"]
    if ratio > marks["max_version_ratio"]:
        misses.append(f"startup: --version / python -c pass {ratio:.2f} > {marks['max_version_ratio']}")
    return misses


def _turn_misses(figures: dict[str, dict[str, float]], marks: dict[str, Any]) -> list[str]:
    cpu = figures["chat"]["cpu_ms"]
    return [f"turn: chat turn CPU {cpu:.2f} ms > {marks['max_chat_cpu_ms']} ms"] if cpu > marks["max_chat_cpu_ms"] else []


def main() -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--skip-tests", action="store_true", help="only the benches, not bench/tests")
    args = parser.parse_args()
    marks = load_thresholds()
    misses: list[str] = []
    if not args.skip_tests:
        tests = subprocess.run([_PY, "-m", "pytest", "-q", str(_BENCH / "tests")], check=False)
        if tests.returncode != 0:
            misses.append("bench/tests failed")
    with tempfile.TemporaryDirectory(prefix="reverie-bench-check-") as tmp:
        out = Path(tmp)
        checks: list[tuple[str, list[str], Callable[[Any, Any], list[str]], Any]] = [
            ("scale.py", ["64", "1000"], _scale_misses, marks["scale"]),
            ("startup.py", ["--repeats", "7"], _startup_misses, marks["startup"]),
            ("turn.py", ["--turns", "40"], _turn_misses, marks["turn"]),
        ]
        for script, script_args, judge, mark in checks:
            misses += judge(_run(script, script_args, out / f"{script}.json"), mark)
    print(f"\nbench-check against {THRESHOLDS_FILE.relative_to(_BENCH.parent)}:")
    for miss in misses:
        print(f"  MISSED {miss}")
    print("  every mark met" if not misses else f"  {len(misses)} missed")
    return 1 if misses else 0


if __name__ == "__main__":
    raise SystemExit(main())

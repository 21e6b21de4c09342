"""Batch throughput: tasks per minute at concurrency 1, 2, 4, 8 and 16 with the scripted model
and a simulated 200 ms model latency (``ScriptedModel(latency=0.2)``), local executor.

Each task is a fresh agent and memory repository running three turns (a remembered rule, which
is a tool call plus a confirmation, then two chat turns): four model calls, one memory commit.
Every concurrency level runs the same ``--tasks`` tasks in a fresh run directory. Target (exit
status 1 when missed): throughput rises with concurrency (each level beats the one before), and
concurrency 8 is at least 3x concurrency 1; with 200 ms per call the work is waiting, so the
runner must overlap it.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

import anyio

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from orchestrator.batch.executors import LocalExecutor
from orchestrator.batch.run import run_suite
from orchestrator.batch.runner import RunOptions
from orchestrator.batch.suite import Task, parse_suite


def _suite(count: int) -> list[Task]:
    lines = []
    for i in range(count):
        lines.append(
            json.dumps(
                {
                    "id": f"bench-{i:03d}",
                    "turns": [f"remember: always end answers with #{i}", "how is the build", "and the tests"],
                    "settings": {"reflection_trigger": "off"},
                    "checks": [{"contains": f"and the tests #{i}"}],
                }
            )
        )
    return parse_suite("\n".join(lines), source="bench")


async def _measure(tasks: list[Task], concurrency: int, latency: float, root: Path) -> tuple[float, int]:
    options = RunOptions(out_dir=root / f"c{concurrency}", latency=latency)
    started = time.perf_counter()
    report = await run_suite(tasks, options, LocalExecutor(concurrency))
    elapsed = time.perf_counter() - started
    return elapsed, report.summary["passed"]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--tasks", type=int, default=32, help="tasks per concurrency level")
    parser.add_argument("--latency", type=float, default=0.2, help="simulated seconds per model call")
    parser.add_argument("--levels", default="1,2,4,8,16", help="comma-separated concurrency levels")
    args = parser.parse_args()
    levels = [int(x) for x in args.levels.split(",")]
    tasks = _suite(args.tasks)
    rows: list[tuple[int, float, float, int]] = []
    with tempfile.TemporaryDirectory(prefix="reverie-bench-batch-") as tmp:
        for level in levels:
            elapsed, passed = anyio.run(_measure, tasks, level, args.latency, Path(tmp), backend="trio")
            rows.append((level, elapsed, len(tasks) / elapsed * 60, passed))
    print(f"{args.tasks} tasks x 3 turns (4 model calls each), scripted model latency {args.latency * 1000:.0f} ms")
    print(f"{'concurrency':>11}  {'seconds':>8}  {'tasks/min':>9}  {'speed-up':>8}  passed")
    for level, elapsed, rate, passed in rows:
        print(f"{level:>11}  {elapsed:>8.2f}  {rate:>9.1f}  {rate / rows[0][2]:>7.2f}x  {passed}/{len(tasks)}")
    rates = [rate for _, _, rate, _ in rows]
    ok = all(b > a for a, b in zip(rates, rates[1:], strict=False)) and all(p == len(tasks) for *_, p in rows)
    by_level = dict(zip(levels, rates, strict=True))
    if 1 in by_level and 8 in by_level:
        ok = ok and by_level[8] >= 3 * by_level[1]
    print("target met: throughput rises with concurrency" if ok else "TARGET MISSED")
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main())

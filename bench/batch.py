"""Batch throughput: tasks per minute at concurrency 1, 2, 4, 8 and 16 with the scripted model
and a simulated 200 ms model latency (``ScriptedModel(latency=0.2)``), local executor.

Each task is a fresh agent and memory repository running three turns (a remembered rule, which
is a tool call plus a confirmation, then two chat turns): four model calls, one memory commit.
Every concurrency level runs the same ``--tasks`` tasks in a fresh run directory, ``--repeats``
times; the levels are interleaved (each round visits every level, in reverse order on odd rounds) so
a change in machine load hits every level alike, and the median of each level is reported with its
spread and its speed-up over the first level. Target (exit status 1 when missed): throughput rises with concurrency (each level beats the one before), and
concurrency 8 is at least 3x concurrency 1; with 200 ms per call the work is waiting, so the
runner must overlap it.
"""

from __future__ import annotations

import argparse
import json
import statistics
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
    options = RunOptions(out_dir=root, latency=latency)
    started = time.perf_counter()
    report = await run_suite(tasks, options, LocalExecutor(concurrency))
    elapsed = time.perf_counter() - started
    return elapsed, report.summary["passed"]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--tasks", type=int, default=32, help="tasks per concurrency level")
    parser.add_argument("--latency", type=float, default=0.2, help="simulated seconds per model call")
    parser.add_argument("--levels", default="1,2,4,8,16", help="comma-separated concurrency levels")
    parser.add_argument("--repeats", type=int, default=3, help="rounds over every level (median reported)")
    args = parser.parse_args()
    levels = [int(x) for x in args.levels.split(",")]
    tasks = _suite(args.tasks)
    times: dict[int, list[float]] = {level: [] for level in levels}
    passed: dict[int, list[int]] = {level: [] for level in levels}
    with tempfile.TemporaryDirectory(prefix="reverie-bench-batch-") as tmp:
        for round_no in range(args.repeats):
            order = levels if round_no % 2 == 0 else list(reversed(levels))
            for level in order:
                root = Path(tmp) / f"r{round_no}-c{level}"
                elapsed, ok_count = anyio.run(_measure, tasks, level, args.latency, root, backend="trio")
                times[level].append(elapsed)
                passed[level].append(ok_count)
    print(
        f"{args.tasks} tasks x 3 turns (4 model calls each), scripted model latency {args.latency * 1000:.0f} ms, "
        f"{args.repeats} interleaved rounds"
    )
    print(f"{'concurrency':>11}  {'median s':>8}  {'min s':>6}  {'max s':>6}  {'tasks/min':>9}  {'speed-up':>8}  passed")
    rates: dict[int, float] = {}
    for level in levels:
        median = statistics.median(times[level])
        rates[level] = len(tasks) / median * 60
        print(
            f"{level:>11}  {median:>8.2f}  {min(times[level]):>6.2f}  {max(times[level]):>6.2f}  "
            f"{rates[level]:>9.1f}  {rates[level] / rates[levels[0]]:>7.2f}x  {min(passed[level])}/{len(tasks)}"
        )
    ordered = [rates[level] for level in levels]
    ok = all(b > a for a, b in zip(ordered, ordered[1:], strict=False))
    ok = ok and all(min(p) == len(tasks) for p in passed.values())
    if 1 in rates and 8 in rates:
        ok = ok and rates[8] >= 3 * rates[1]
    print("target met: throughput rises with concurrency" if ok else "TARGET MISSED")
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main())

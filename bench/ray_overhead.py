"""Ray's per-task overhead against the local executor, on this machine (``docs/distributed.md``).

The same generated suite (``--tasks`` tasks of one plain chat turn, reflection off) runs on the
local executor (in this process) and on the Ray executor (a private loopback Ray started once,
before any timing, as a sweep shares one), ``--rounds`` times, interleaved A/B so a change in the
shared machine's load hits both alike. One Ray round first is not counted: Ray starts its worker
processes on first use and each imports reverie (seconds on a loaded machine; a long run pays it
once per worker). Both run ``--concurrency`` tasks at a time. Printed per
round: each executor's elapsed (summary.json's: the tasks' time, not Ray's start) and the
difference per task; then the medians. The Ray figure includes what no shared disk costs: the
task's scratch directory, its template built on the worker, its files packed and unpacked.

    .venv/bin/python bench/ray_overhead.py --tasks 16 --rounds 5 --concurrency 2
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
from pathlib import Path

import anyio

from orchestrator.batch.executors import LocalExecutor
from orchestrator.batch.ray_exec import RayExecutor, start_local_ray
from orchestrator.batch.run import run_suite
from orchestrator.batch.runner import RunOptions
from orchestrator.batch.suite import load_suite


def _suite(path: Path, count: int) -> Path:
    lines = [
        {"id": f"t{i:03d}", "turns": [f"just chatting {i}"], "settings": {"reflection_trigger": "off"},
         "checks": [{"contains": f"just chatting {i}"}]}
        for i in range(count)
    ]
    path.write_text("".join(json.dumps(line) + "\n" for line in lines), encoding="utf-8")
    return path


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tasks", type=int, default=16)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--concurrency", type=int, default=2)
    args = parser.parse_args()
    import ray

    start_local_ray(args.concurrency)
    try:
        with tempfile.TemporaryDirectory(prefix="ray-overhead-") as scratch:
            root = Path(scratch)
            tasks = load_suite(_suite(root / "suite.jsonl", args.tasks))
            local_s: list[float] = []
            ray_s: list[float] = []
            anyio.run(lambda: run_suite(tasks, RunOptions(out_dir=root / "warm-up"), RayExecutor(args.concurrency)),
                      backend="trio")
            for n in range(args.rounds):
                order = [("local", LocalExecutor(args.concurrency)), ("ray", RayExecutor(args.concurrency))]
                if n % 2:
                    order.reverse()
                for name, executor in order:
                    out = root / f"{name}-{n}"
                    report = anyio.run(lambda e=executor, o=out: run_suite(tasks, RunOptions(out_dir=o), e), backend="trio")
                    assert report.summary["passed"] == args.tasks, report.summary
                    (local_s if name == "local" else ray_s).append(float(report.summary["elapsed"]))
                per_task = (ray_s[-1] - local_s[-1]) / args.tasks * args.concurrency
                print(f"round {n + 1}: local {local_s[-1]:.2f} s, ray {ray_s[-1]:.2f} s, "
                      f"ray's overhead {per_task * 1000:.0f} ms per task (x concurrency {args.concurrency})", flush=True)
    finally:
        ray.shutdown()
    local_m, ray_m = statistics.median(local_s), statistics.median(ray_s)
    print(f"median of {args.rounds}: {args.tasks} tasks at concurrency {args.concurrency}: local {local_m:.2f} s "
          f"({local_m / args.tasks * args.concurrency * 1000:.0f} ms per task), ray {ray_m:.2f} s "
          f"({ray_m / args.tasks * args.concurrency * 1000:.0f} ms per task), ratio {ray_m / local_m:.1f}x")


if __name__ == "__main__":
    main()

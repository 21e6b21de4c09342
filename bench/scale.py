"""Scale: N concurrent sessions on this machine, bounded by the model's latency or by reverie's own cost?

For each N it writes N generated tasks of three plain chat turns (reflection off, a check on the last
answer) and runs the real command line in a child process::

    reverie run SUITE --concurrency N --scripted-latency 0.2 --out DIR -q

Three model calls of 0.2 s each make the ideal 0.6 s whatever N. Reported per N: ``elapsed`` from the
run's summary.json (it includes creating every repository and store, not the process's start-up and
imports, which ``process s`` adds: the child's whole wall time), efficiency = 0.6 s / elapsed,
peak RSS and peak OS threads of the child (sampled from /proc every 50 ms; RSS from ``VmHWM``), CPU
seconds of the child and everything it waited for (git, hooks) divided by the number of turns (and
the child's own share, "in-process", read from /proc before it exits), and
how many tasks passed. The machine's load average before each run is printed too, since the cores are
shared. Targets (issue 14): N=64 efficiency >= 0.5; N=1000 every task passes, efficiency >= 0.05 and
peak RSS < 2 GiB; the exit status is 1 when a measured N misses its target.

    .venv/bin/python bench/scale.py                  # N = 16, 64, 256, 1000
    .venv/bin/python bench/scale.py 64 1000 --timeout 600
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass
from pathlib import Path

TURNS = 3
LATENCY = 0.2
IDEAL = TURNS * LATENCY
DEFAULT_SIZES = (16, 64, 256, 1000)
_TARGETS = {64: 0.5, 1000: 0.05}
_RSS_LIMIT_MIB = 2048


@dataclass(frozen=True)
class Row:
    n: int
    elapsed: float | None
    wall: float
    passed: int
    peak_rss_mib: float
    peak_threads: int
    cpu_per_turn_ms: float
    own_cpu_per_turn_ms: float
    load: float
    note: str

    @property
    def efficiency(self) -> float:
        return IDEAL / self.elapsed if self.elapsed else 0.0


def _write_suite(path: Path, n: int) -> None:
    lines = []
    for i in range(n):
        task = {
            "id": f"s{i:05d}",
            "turns": [f"hello number {i}", "how is the build", f"and the tests {i}"],
            "settings": {"reflection_trigger": "off"},
            "checks": [{"contains": f"I heard: and the tests {i}"}],
        }
        lines.append(json.dumps(task))
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")


def _reverie() -> list[str]:
    found = Path(sys.executable).with_name("reverie")
    return [str(found)] if found.exists() else [sys.executable, "-m", "orchestrator.cli.app"]


class _Sampler:
    """Peak RSS and thread count of one process, read from /proc until it exits."""

    def __init__(self, pid: int) -> None:
        self.pid = pid
        self.rss_kib = 0
        self.threads = 0
        self.cpu = 0.0
        self._tick = os.sysconf("SC_CLK_TCK")
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, daemon=True)
        self._thread.start()

    def _loop(self) -> None:
        status = Path(f"/proc/{self.pid}/status")
        stat = Path(f"/proc/{self.pid}/stat")
        while not self._stop.is_set():
            try:
                text = status.read_text()
                fields = stat.read_text().rsplit(")", 1)[1].split()
            except (OSError, IndexError):
                return
            self.cpu = max(self.cpu, (int(fields[11]) + int(fields[12])) / self._tick)
            for line in text.splitlines():
                if line.startswith("VmHWM:"):
                    self.rss_kib = max(self.rss_kib, int(line.split()[1]))
                elif line.startswith("Threads:"):
                    self.threads = max(self.threads, int(line.split()[1]))
            self._stop.wait(0.05)

    def stop(self) -> None:
        self._stop.set()
        self._thread.join()


def _children_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def measure(n: int, root: Path, timeout: float) -> Row:
    suite = root / f"scale-{n}.jsonl"
    out = root / f"run-{n}"
    _write_suite(suite, n)
    load = os.getloadavg()[0]
    cpu_before = _children_cpu()
    cmd = [*_reverie(), "run", str(suite), "--concurrency", str(n), "--scripted-latency", str(LATENCY)]
    cmd += ["--out", str(out), "-q"]
    began = time.perf_counter()
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    sampler = _Sampler(proc.pid)
    note = ""
    try:
        _, stderr = proc.communicate(timeout=timeout)
        if proc.returncode not in (0, 1):
            note = f"exit {proc.returncode}: {stderr.strip().splitlines()[-1:] or ''}"
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.communicate()
        note = f"killed after {timeout:.0f} s"
    wall = time.perf_counter() - began
    sampler.stop()
    cpu = _children_cpu() - cpu_before
    elapsed: float | None = None
    passed = 0
    summary_path = out / "summary.json"
    if summary_path.exists():
        summary = json.loads(summary_path.read_text())
        elapsed = float(summary["elapsed"])
        passed = int(summary["passed"])
    elif (out / "results.jsonl").exists():
        passed = sum(
            '"status": "passed"' in line for line in (out / "results.jsonl").read_text().splitlines()
        )
    shutil.rmtree(out, ignore_errors=True)
    turns = n * TURNS
    return Row(
        n,
        elapsed,
        wall,
        passed,
        sampler.rss_kib / 1024,
        sampler.threads,
        cpu / turns * 1000,
        sampler.cpu / turns * 1000,
        load,
        note,
    )


def _verdict(row: Row) -> str:
    problems = []
    if row.passed != row.n:
        problems.append(f"{row.n - row.passed} not passed")
    target = _TARGETS.get(row.n)
    if target is not None and row.efficiency < target:
        problems.append(f"efficiency < {target}")
    if row.n >= 1000 and row.peak_rss_mib >= _RSS_LIMIT_MIB:
        problems.append("RSS >= 2 GiB")
    return "MISSED: " + ", ".join(problems) if problems else "ok"


def main() -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("sizes", nargs="*", type=int, help=f"session counts (default {DEFAULT_SIZES})")
    parser.add_argument("--timeout", type=float, default=600.0, help="seconds before a run is killed")
    args = parser.parse_args()
    sizes = args.sizes or list(DEFAULT_SIZES)
    print(
        f"{TURNS} chat turns per task, scripted latency {LATENCY * 1000:.0f} ms, ideal {IDEAL:.1f} s; "
        f"{os.cpu_count()} CPUs"
    )
    header = f"{'N':>5} {'load':>5} {'elapsed s':>9} {'process s':>9} {'efficiency':>10} {'peak RSS MiB':>12} {'threads':>7} "
    header += f"{'CPU/turn ms':>11} {'in-process':>10} {'passed':>11}  verdict"
    rows = []
    with tempfile.TemporaryDirectory(prefix="reverie-bench-scale-") as tmp:
        for n in sizes:
            row = measure(n, Path(tmp), args.timeout)
            rows.append(row)
            elapsed = f"{row.elapsed:.2f}" if row.elapsed is not None else "-"
            if len(rows) == 1:
                print(header)
            print(
                f"{row.n:>5} {row.load:>5.2f} {elapsed:>9} {row.wall:>9.2f} {row.efficiency:>10.3f} {row.peak_rss_mib:>12.0f} "
                f"{row.peak_threads:>7} {row.cpu_per_turn_ms:>11.1f} {row.own_cpu_per_turn_ms:>10.1f} "
                f"{f'{row.passed}/{row.n}':>11}  {_verdict(row)}" + (f" ({row.note})" if row.note else ""),
                flush=True,
            )
    return 0 if all(_verdict(r) == "ok" for r in rows) else 1


if __name__ == "__main__":
    raise SystemExit(main())

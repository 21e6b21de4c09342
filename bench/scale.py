"""Scale: N concurrent sessions on this machine, bounded by the model's latency or by reverie's own cost?

For each N it writes N generated tasks of three plain chat turns (reflection off, a check on the last
answer) and runs the real command line in a child process (the driver)::

    reverie run SUITE --concurrency N --scripted-latency 0.2 --out DIR -q

Three model calls of 0.2 s each make the ideal 0.6 s whatever N. ``elapsed`` is summary.json's (it
includes creating every repository and store, not the process's start-up and imports, which
``process s`` adds: the driver's whole wall time); efficiency = 0.6 s / elapsed.

The run is a process tree: the driver, the worker processes it spreads tasks over (``--processes``,
auto by default), and git and hook processes under either. Every 50 ms the bench scans /proc for the
driver's live descendants and reports, over that tree:

- ``RSS MiB``: the peak of the summed resident sets (pages shared between processes, e.g. after a
  fork, count once per process, so this errs high); ``largest``: the highest peak of any one
  process (its ``VmHWM``) among those sampled. ``wait4``'s maximum would not do: a child's includes
  its parent's resident set at the moment it exec'd (the bench's, or a test runner's);
- ``threads``: the peak of the summed OS threads; ``procs``: the driver plus the worker processes
  seen (a worker is a direct child of the driver running the same executable);
- CPU per turn (all CPU seconds of the tree / the number of turns), split into the ``driver``'s own
  (exact: read from /proc while it is a zombie, before it is reaped), the ``workers``' own (the last
  sample of each; a worker's time reaches its parent only when it is reaped, so it is read live,
  and up to its last 50 ms are missed) and ``git+other``: the rest (every git and hook process,
  too short-lived to sample; it also holds whatever the workers' last samples missed).

Before each run it also prints what tells a busy or slowed machine apart: the load average,
``busy`` (the share of both cores other processes used in the half second before), ``calib ms`` (the
best of three runs of a fixed pure-Python loop) and ``fs us`` (creating one empty file in the runs'
folder). Targets (P4): N=64 efficiency >= 0.5; N=1000 every task passes, efficiency >= 0.05 and the
tree's peak RSS < 2 GiB; the exit status is 1 when a measured N misses its target.

Every run's directory is kept until the bench ends, then removed together, and before each run the
bench syncs the file systems and waits ``_SETTLE`` seconds, so earlier deletions are not charged to
the run (why, with the figures: ``bench/README.md``, "scale.py and the machine").

    .venv/bin/python bench/scale.py                  # N = 16, 64, 256, 1000
    .venv/bin/python bench/scale.py 64 1000 --timeout 600
    .venv/bin/python bench/scale.py 64 --dir /dev/shm   # the same on tmpfs
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

from thresholds import load_thresholds

TURNS = 3
LATENCY = 0.2
IDEAL = TURNS * LATENCY
DEFAULT_SIZES = (16, 64, 256, 1000)
_THRESHOLDS = load_thresholds()["scale"]
_TARGETS = {int(n): float(t["min_efficiency"]) for n, t in _THRESHOLDS.items() if "min_efficiency" in t}
_RSS_LIMIT_MIB = float(_THRESHOLDS["1000"]["max_tree_rss_mib"])
_SETTLE = 6.0
_SAMPLE_EVERY = 0.05
_TICK = os.sysconf("SC_CLK_TCK")
_PAGE = os.sysconf("SC_PAGE_SIZE")


@dataclass(frozen=True)
class Row:
    n: int
    elapsed: float | None
    wall: float
    passed: int
    tree_rss_mib: float
    largest_rss_mib: float
    peak_threads: int
    processes: int
    cpu_per_turn_ms: float
    driver_cpu_per_turn_ms: float
    workers_cpu_per_turn_ms: float
    other_cpu_per_turn_ms: float
    load: float
    calib_ms: float
    busy: float
    fs_us: float
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


def _stat(pid: int) -> list[str] | None:
    """The fields of /proc/PID/stat after the command name (``[0]`` is field 3, the state)."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return None


def _exe(pid: int) -> str | None:
    try:
        return os.readlink(f"/proc/{pid}/exe")
    except OSError:
        return None


def _hwm_kib(pid: int) -> int:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1])
    except (OSError, ValueError, IndexError):
        pass
    return 0


def _cpu(fields: list[str]) -> float:
    return (int(fields[11]) + int(fields[12])) / _TICK


@dataclass
class _Tree:
    """What the samples saw of one driver's process tree. Processes are keyed by (pid, start time)
    so a reused pid is a new process."""

    root: int
    exe: str | None = None
    rss_bytes: int = 0
    largest_kib: int = 0
    threads: int = 0
    worker_cpu: dict[tuple[int, str], float] = field(default_factory=dict)
    worker_sightings: dict[tuple[int, str], int] = field(default_factory=dict)
    live: dict[int, str] = field(default_factory=dict)

    def sample(self) -> None:
        parents: dict[int, int] = {}
        stats: dict[int, list[str]] = {}
        for entry in os.scandir("/proc"):
            if not entry.name.isdigit():
                continue
            fields = _stat(int(entry.name))
            if fields is None or fields[0] in "ZX":
                continue
            pid = int(entry.name)
            parents[pid] = int(fields[1])
            stats[pid] = fields
        if self.root not in stats:
            return
        if self.exe is None:
            self.exe = _exe(self.root)
        tree = {self.root}
        grew = True
        while grew:
            added = {pid for pid, parent in parents.items() if parent in tree and pid not in tree}
            tree |= added
            grew = bool(added)
        self.live = {pid: stats[pid][19] for pid in tree}
        self.rss_bytes = max(self.rss_bytes, sum(int(stats[p][21]) for p in tree) * _PAGE)
        self.threads = max(self.threads, sum(int(stats[p][17]) for p in tree))
        self.largest_kib = max([self.largest_kib, *(_hwm_kib(p) for p in tree)])
        for pid in tree:
            if parents[pid] != self.root or _exe(pid) != self.exe:
                continue
            key = (pid, stats[pid][19])
            self.worker_cpu[key] = _cpu(stats[pid])
            self.worker_sightings[key] = self.worker_sightings.get(key, 0) + 1

    def kill(self, pids: dict[int, str]) -> int:
        """SIGKILL those of ``pids`` (pid: start time) still running as the same process; how many.
        A worker has a session of its own, so killing the driver alone would leave it running."""
        killed = 0
        for pid, started in pids.items():
            fields = _stat(pid)
            if fields is None or fields[19] != started or fields[0] in "ZX":
                continue
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(pid, signal.SIGKILL)
                killed += 1
        return killed

    @property
    def workers(self) -> int:
        """Seen twice: a child between fork and exec (about to be git) runs the driver's executable too."""
        return sum(1 for seen in self.worker_sightings.values() if seen >= 2)


def _exited(pid: int) -> bool:
    """True once the driver has exited, leaving it a zombie (not reaped, so /proc still has its times)."""
    return os.waitid(os.P_PID, pid, os.WEXITED | os.WNOHANG | os.WNOWAIT) is not None


@dataclass(frozen=True)
class TreeUsage:
    """One command's process tree, from start to exit (CPU in seconds, memory in MiB)."""

    wall: float
    returncode: int
    tree_rss_mib: float
    largest_rss_mib: float
    threads: int
    workers: int
    cpu: float
    driver_cpu: float
    workers_cpu: float
    note: str
    stderr: str

    @property
    def other_cpu(self) -> float:
        return max(0.0, self.cpu - self.driver_cpu - self.workers_cpu)


def run_tree(cmd: list[str], timeout: float, *, every: float = _SAMPLE_EVERY) -> TreeUsage:
    """Run ``cmd`` (the driver) to its end, sampling its process tree every ``every`` seconds; past
    ``timeout`` the whole tree is killed."""
    note = ""
    with tempfile.TemporaryFile(mode="w+") as stderr:
        began = time.perf_counter()
        proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=stderr, text=True)
        tree = _Tree(proc.pid)
        deadline = began + timeout
        while not _exited(proc.pid):
            tree.sample()
            if time.perf_counter() > deadline and not note:
                note = f"killed after {timeout:.0f} s"
                tree.kill(tree.live)
            time.sleep(every)
        wall = time.perf_counter() - began
        left = tree.kill({pid: started for pid, started in tree.worker_cpu})
        if left and not note:
            note = f"{left} worker process(es) outlived the driver (killed; their CPU is not counted)"
        final = _stat(proc.pid)
        driver_cpu = _cpu(final) if final is not None else 0.0
        _, status, usage = os.wait4(proc.pid, 0)
        proc.returncode = os.waitstatus_to_exitcode(status)
        stderr.seek(0)
        text = stderr.read()
    return TreeUsage(
        wall=wall,
        returncode=proc.returncode,
        tree_rss_mib=tree.rss_bytes / 2**20,
        largest_rss_mib=tree.largest_kib / 1024,
        threads=tree.threads,
        workers=tree.workers,
        cpu=usage.ru_utime + usage.ru_stime,
        driver_cpu=driver_cpu,
        workers_cpu=sum(tree.worker_cpu.values()),
        note=note,
        stderr=text,
    )


def measure(n: int, root: Path, timeout: float) -> Row:
    suite = root / f"scale-{n}.jsonl"
    out = Path(tempfile.mkdtemp(prefix=f"run-{n}-", dir=root)) / "out"
    _write_suite(suite, n)
    os.sync()
    time.sleep(_SETTLE)
    load = os.getloadavg()[0]
    fs_us = _probe_fs(root)
    busy = _others_busy()
    calib = _calibrate()
    cmd = [*_reverie(), "run", str(suite), "--concurrency", str(n), "--scripted-latency", str(LATENCY)]
    cmd += ["--out", str(out), "-q"]
    used = run_tree(cmd, timeout)
    note = used.note
    if used.returncode not in (0, 1) and not note:
        note = f"exit {used.returncode}: {used.stderr.strip().splitlines()[-1:] or ''}"
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
    per_turn = 1000 / (n * TURNS)
    return Row(
        n=n,
        elapsed=elapsed,
        wall=used.wall,
        passed=passed,
        tree_rss_mib=used.tree_rss_mib,
        largest_rss_mib=used.largest_rss_mib,
        peak_threads=used.threads,
        processes=1 + used.workers,
        cpu_per_turn_ms=used.cpu * per_turn,
        driver_cpu_per_turn_ms=used.driver_cpu * per_turn,
        workers_cpu_per_turn_ms=used.workers_cpu * per_turn,
        other_cpu_per_turn_ms=used.other_cpu * per_turn,
        load=load,
        calib_ms=calib,
        busy=busy,
        fs_us=fs_us,
        note=note,
    )


def _verdict(row: Row) -> str:
    problems = []
    if row.passed != row.n:
        problems.append(f"{row.n - row.passed} not passed")
    target = _TARGETS.get(row.n)
    if target is not None and row.efficiency < target:
        problems.append(f"efficiency < {target}")
    if row.n >= 1000 and row.tree_rss_mib >= _RSS_LIMIT_MIB:
        problems.append("tree RSS >= 2 GiB")
    return "MISSED: " + ", ".join(problems) if problems else "ok"


_GROUPS = f"{'':>59}  {'peak over the process tree':-^32}  {'CPU per turn, ms':-^31}"
_HEADER = (
    f"{'N':>5} {'load':>5} {'busy':>4} {'calib':>5} {'fs us':>5} {'elapsed s':>9} {'process s':>9} {'efficiency':>10}  "
    f"{'RSS MiB':>8} {'largest':>8} {'threads':>8} {'procs':>5}  "
    f"{'all':>6} {'driver':>6} {'workers':>7} {'git+other':>9}  {'passed':>11}  verdict"
)


def _others_busy(seconds: float = 0.5) -> float:
    """The share of all cores busy over ``seconds`` (nothing of the bench's runs meanwhile)."""

    def counters() -> tuple[int, int]:
        with open("/proc/stat", encoding="ascii") as stat:
            ticks = [int(x) for x in stat.readline().split()[1:]]
        return sum(ticks), ticks[3] + ticks[4]

    total, idle = counters()
    time.sleep(seconds)
    total_after, idle_after = counters()
    return 1.0 - (idle_after - idle) / max(1, total_after - total)


_FS_PROBES = 32


def _probe_fs(root: Path) -> float:
    """Microseconds of CPU to create one empty file in ``root`` (files kept: deleting them would be
    charged to the next run)."""
    folder = Path(tempfile.mkdtemp(prefix=".fs-probe-", dir=root))
    began = time.thread_time()
    for i in range(_FS_PROBES):
        os.close(os.open(folder / f"f{i}", os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644))
    return (time.thread_time() - began) / _FS_PROBES * 1e6


def _calibrate() -> float:
    """Milliseconds for a fixed amount of pure-Python work, best of three."""
    best = float("inf")
    for _ in range(3):
        began = time.perf_counter()
        total = 0
        for i in range(1_000_000):
            total += i
        best = min(best, time.perf_counter() - began)
    return best * 1000


def _line(row: Row) -> str:
    elapsed = f"{row.elapsed:.2f}" if row.elapsed is not None else "-"
    return (
        f"{row.n:>5} {row.load:>5.2f} {row.busy:>4.0%} {row.calib_ms:>5.0f} {row.fs_us:>5.0f} {elapsed:>9} {row.wall:>9.2f} {row.efficiency:>10.3f}  "
        f"{row.tree_rss_mib:>8.0f} {row.largest_rss_mib:>8.0f} {row.peak_threads:>8} {row.processes:>5}  "
        f"{row.cpu_per_turn_ms:>6.1f} {row.driver_cpu_per_turn_ms:>6.1f} {row.workers_cpu_per_turn_ms:>7.1f} "
        f"{row.other_cpu_per_turn_ms:>9.1f}  {f'{row.passed}/{row.n}':>11}  {_verdict(row)}"
        + (f" ({row.note})" if row.note else "")
    )


def main() -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("sizes", nargs="*", type=int, help=f"session counts (default {DEFAULT_SIZES})")
    parser.add_argument("--timeout", type=float, default=600.0, help="seconds before a run is killed")
    parser.add_argument(
        "--dir", type=Path, default=None,
        help="where the runs are written (default: the system's temporary folder; e.g. /dev/shm for tmpfs)",
    )
    parser.add_argument("--json", type=Path, default=None, help="also write every row here (bench/check.py reads it)")
    args = parser.parse_args()
    sizes = args.sizes or list(DEFAULT_SIZES)
    print(
        f"{TURNS} chat turns per task, scripted latency {LATENCY * 1000:.0f} ms, ideal {IDEAL:.1f} s; "
        f"{os.cpu_count()} CPUs; RSS summed over the tree (largest: one process), procs = driver + workers"
    )
    rows = []
    with tempfile.TemporaryDirectory(prefix="reverie-bench-scale-", dir=args.dir) as tmp:
        for n in sizes:
            row = measure(n, Path(tmp), args.timeout)
            rows.append(row)
            if len(rows) == 1:
                print(_GROUPS)
                print(_HEADER)
            print(_line(row), flush=True)
    if args.json is not None:
        args.json.write_text(json.dumps([{**asdict(r), "efficiency": r.efficiency} for r in rows], indent=1))
    return 0 if all(_verdict(r) == "ok" for r in rows) else 1


if __name__ == "__main__":
    raise SystemExit(main())

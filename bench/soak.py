"""Soak: one stream-json chat session of N turns (default 10,000) on the embedded model, with
reflection (step-count) and compaction active and a memory edit every 50 turns, watched from
outside the process (P10)::

    nice python bench/soak.py [--turns 10000] [--every 1000] [--trigger step-count:3] [--window 4000]

One ``reverie chat --input-format stream-json --output-format json`` process answers every turn;
the bench writes a line, reads its result, and every ``--every`` turns prints: CPU per turn over
that stretch (the process's own user+system time plus its reaped children's, git and the hook, from
/proc/PID/stat), RSS (VmRSS), open file descriptors, OS threads, the store's size (the SQLite file
and its -wal), the memory repository's size (``.git``), and the worktrees and reflection or
compaction branches present at that moment (a running reflection has one of each). The turns go
one at a time, so the figures are the session's own, not a backlog's.

At the end (stdin closed, the process exits after S23's wait) it checks P10's thresholds and
prints each with its figure:

- CPU per turn over the last stretch <= 1.2 x the second (the first pays imports and warm-up);
- RSS growth after the first stretch <= 20 MB;
- descriptors and threads flat (last stretch <= the largest seen after the first, plus 2);
- no worktree and no ``reverie/`` branch left;
- every ``compaction.start`` and ``reflection.launch`` of the store has its one end;
- every memory edit (``remember that I like soak-fact-N``) is in ``human.md`` at HEAD.

The exit status is 1 when one misses. Timings are noisy on a shared machine: the load average is
printed with each row; compare ratios, run it under ``nice``.
"""

from __future__ import annotations

import argparse
import json
import os
import sqlite3
import subprocess
import sys
import tempfile
import time
from contextlib import closing
from dataclasses import dataclass
from pathlib import Path

_TICKS = os.sysconf("SC_CLK_TCK")


@dataclass(frozen=True)
class Sample:
    """The process and its files after ``turns`` turns."""

    turns: int
    cpu_s: float
    rss_mb: float
    fds: int
    threads: int
    store_mb: float
    repo_mb: float
    worktrees: int
    branches: int
    at: float


def _cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    # utime, stime, cutime, cstime: fields 14-17 of stat(5), 12-15 after the name
    return sum(int(v) for v in fields[11:15]) / _TICKS


def _status(pid: int, key: str) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(key + ":"):
            return int(line.split()[1])
    raise KeyError(key)


def _size_mb(path: Path) -> float:
    """Bytes under ``path`` in MB; what the running session removes meanwhile (a worktree's record,
    a lock) is skipped, not an error."""
    if path.is_file():
        return path.stat().st_size / 1e6
    total = 0
    for folder, _, names in os.walk(path):
        for name in names:
            try:
                total += os.stat(os.path.join(folder, name)).st_size
            except FileNotFoundError:
                pass
    return total / 1e6


def _git(repo: Path, *args: str) -> list[str]:
    done = subprocess.run(["git", "-C", str(repo), *args], capture_output=True, text=True, check=True)
    return [line for line in done.stdout.splitlines() if line.strip()]


def _sample(pid: int, turns: int, home: Path, repo: Path) -> Sample:
    store = home / "reverie.sqlite3"
    wal = home / "reverie.sqlite3-wal"
    return Sample(
        turns=turns,
        cpu_s=_cpu_seconds(pid),
        rss_mb=_status(pid, "VmRSS") / 1024,
        fds=len(os.listdir(f"/proc/{pid}/fd")),
        threads=_status(pid, "Threads"),
        store_mb=_size_mb(store) + (_size_mb(wal) if wal.exists() else 0.0),
        repo_mb=_size_mb(repo / ".git"),
        worktrees=len(_git(repo, "worktree", "list")) - 1,
        branches=len(_git(repo, "for-each-ref", "--format=%(refname)", "refs/heads/reverie/")),
        at=time.monotonic(),
    )


def _message(turn: int, edit_every: int) -> str:
    if turn % edit_every == 0:
        return f"remember that I like soak-fact-{turn}"
    return f"message {turn}: " + " ".join(f"word{(turn * 7 + j) % 97}" for j in range(30))


def _unended(store: Path) -> dict[str, int]:
    with closing(sqlite3.connect(store)) as db:
        rows = db.execute(
            "SELECT kind, json_extract(payload, '$.compaction_id'), json_extract(payload, '$.reflection_id') "
            "FROM events WHERE kind LIKE 'compaction.%' OR kind IN ('reflection.launch', 'reflection.outcome')"
        ).fetchall()
    compactions = {c for k, c, _ in rows if k == "compaction.start"}
    compaction_ends = [c for k, c, _ in rows if k != "compaction.start" and k != "compaction.progress" and c]
    launches = {r for k, _, r in rows if k == "reflection.launch"}
    outcomes = [r for k, _, r in rows if k == "reflection.outcome"]
    return {
        "compaction.start": len(compactions),
        "compaction without an end": len(compactions - set(compaction_ends)),
        "compaction ended twice": len(compaction_ends) - len(set(compaction_ends)),
        "reflection.launch": len(launches),
        "reflection without an outcome": len(launches - set(outcomes)),
        "reflection settled twice": len(outcomes) - len(set(outcomes)),
    }


def _row(prev: Sample, now: Sample, load: float) -> str:
    per_turn = (now.cpu_s - prev.cpu_s) / max(1, now.turns - prev.turns) * 1000
    wall = (now.at - prev.at) / max(1, now.turns - prev.turns) * 1000
    return (
        f"{now.turns:>7,} {per_turn:>9.2f} {wall:>9.2f} {now.rss_mb:>8.1f} {now.fds:>5} {now.threads:>5}"
        f" {now.store_mb:>9.1f} {now.repo_mb:>8.2f} {now.worktrees:>5} {now.branches:>6} {load:>6.2f}"
    )


_HEADER = (
    f"{'turns':>7} {'cpu ms/t':>9} {'wall ms/t':>9} {'RSS MB':>8} {'fds':>5} {'thr':>5}"
    f" {'store MB':>9} {'repo MB':>8} {'wtree':>5} {'branch':>6} {'load':>6}"
)


def soak(turns: int, every: int, trigger: str, window: int, edit_every: int, home: Path) -> int:
    (home / "config.toml").write_text(
        f'[reflection]\ntrigger = "{trigger}"\n[compaction]\ncontext_window = {window}\n', encoding="utf-8"
    )
    env = dict(os.environ, REVERIE_HOME=str(home))
    env.pop("REVERIE_SCRIPTED_LATENCY", None)
    command = [sys.executable, "-m", "orchestrator", "chat", "--input-format", "stream-json", "--output-format", "json"]
    proc = subprocess.Popen(command, env=env, text=True, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    assert proc.stdin is not None and proc.stdout is not None
    repo = home / "agents" / "agent-default" / "memory"
    samples: list[Sample] = []
    print(_HEADER, flush=True)
    failed_turns = 0
    for turn in range(1, turns + 1):
        proc.stdin.write(json.dumps({"type": "user", "text": _message(turn, edit_every)}) + "\n")
        proc.stdin.flush()
        line = proc.stdout.readline()
        if not line:
            print(f"the session ended at turn {turn}: {proc.stderr.read() if proc.stderr else ''}", file=sys.stderr)
            return 1
        failed_turns += json.loads(line).get("status") != "end_turn"
        if turn == 1:
            samples.append(_sample(proc.pid, 0, home, repo))
        if turn % every == 0:
            samples.append(_sample(proc.pid, turn, home, repo))
            print(_row(samples[-2], samples[-1], os.getloadavg()[0]), flush=True)
    _, err = proc.communicate(timeout=600)
    return _verdict(samples, home, repo, turns, edit_every, failed_turns, proc.returncode, err)


def _verdict(
    samples: list[Sample], home: Path, repo: Path, turns: int, edit_every: int, failed: int, code: int, err: str
) -> int:
    checks: list[tuple[str, bool, str]] = []
    stretches = samples[1:]
    if len(stretches) >= 3:
        cost = [(b.cpu_s - a.cpu_s) / (b.turns - a.turns) for a, b in zip(samples, stretches, strict=False)]
        ratio = cost[-1] / cost[1]
        checks.append(("CPU per turn, last stretch <= 1.2 x the second", ratio <= 1.2, f"{ratio:.2f}x"))
        growth = stretches[-1].rss_mb - stretches[0].rss_mb
        checks.append(("RSS growth after the first stretch <= 20 MB", growth <= 20, f"{growth:+.1f} MB"))
        fds = max(s.fds for s in stretches[:-1])
        threads = max(s.threads for s in stretches[:-1])
        checks.append(("descriptors flat", stretches[-1].fds <= fds + 2, f"{stretches[0].fds} -> {stretches[-1].fds}"))
        checks.append(
            ("threads flat", stretches[-1].threads <= threads + 2, f"{stretches[0].threads} -> {stretches[-1].threads}")
        )
    worktrees = len(_git(repo, "worktree", "list")) - 1
    branches = _git(repo, "for-each-ref", "--format=%(refname)", "refs/heads/reverie/")
    checks.append(("no worktree left", worktrees == 0, str(worktrees)))
    checks.append(("no reverie/ branch left", not branches, ", ".join(branches[:3]) or "none"))
    ends = _unended(home / "reverie.sqlite3")
    unended = sum(v for k, v in ends.items() if "without" in k or "twice" in k)
    checks.append(("every start has its one end", unended == 0, json.dumps(ends)))
    human = "\n".join(_git(repo, "show", "HEAD:human.md"))
    edits = range(edit_every, turns + 1, edit_every)
    missing = [n for n in edits if f"soak-fact-{n}\n" not in human + "\n"]
    checks.append(("every memory edit is in HEAD", not missing, f"{len(edits) - len(missing)}/{len(edits)}"))
    checks.append(("every turn ended end_turn", failed == 0, f"{failed} not"))
    checks.append(("the session exited 0", code == 0, f"{code} {err.strip()[-200:]}"))
    print()
    for name, ok, figure in checks:
        print(f"{'ok  ' if ok else 'MISS'} {name}: {figure}")
    return 0 if all(ok for _, ok, _ in checks) else 1


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument("--turns", type=int, default=10_000)
    parser.add_argument("--every", type=int, default=1_000, help="turns per printed stretch")
    parser.add_argument("--trigger", default="step-count:3", help="[reflection] trigger")
    parser.add_argument("--window", type=int, default=4_000, help="[compaction] context_window")
    parser.add_argument("--edit-every", type=int, default=50, help="a memory edit every N turns")
    parser.add_argument("--keep", type=Path, default=None, help="use (and keep) this REVERIE_HOME")
    args = parser.parse_args()
    if args.keep is not None:
        args.keep.mkdir(parents=True, exist_ok=True)
        return soak(args.turns, args.every, args.trigger, args.window, args.edit_every, args.keep)
    with tempfile.TemporaryDirectory(prefix="reverie-soak-") as tmp:
        return soak(args.turns, args.every, args.trigger, args.window, args.edit_every, Path(tmp))


if __name__ == "__main__":
    raise SystemExit(main())

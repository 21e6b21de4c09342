"""Benchmark the MemFS v2 compiler against a reference-style reader.

For core files 5/20/100 x deferred files 0/100/1,000/10,000 it builds one v2 repository (with
``git fast-import``, cached in a temporary directory for the run) and measures:

* reverie warm: the steady-state per-compile time (the compiler runs every turn, so its object
  reader is already running): median of several consecutive compiles after one warm-up;
* reverie re-render: the same, with the per-tree render cache cleared before each compile (every
  root file and child index is collected, parsed, sorted and rendered again; objects come from the
  running reader's caches) - what a compile costs right after a commit that changed the tree;
* reverie cold: the first compile with an empty reader pool (starts ``git cat-file``);
* baseline: what the reference does per compile: ``git rev-parse --verify HEAD``,
  ``git ls-tree -r --name-only HEAD``, then one ``git show HEAD:<path>`` per rendered file
  (root Markdown files and first-level child indexes); median of a few runs.

Deferred files sit in indexed child directories of 100 files each. Targets (checked, exit status
1 when missed): at 20 core + 1,000 deferred reverie (warm) is >= 10x faster than the baseline, and
reverie's warm time grows < 3x from 0 to 10,000 deferred files (for every core count).
"""

from __future__ import annotations

import os
import statistics
import subprocess
import sys
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from orchestrator.memfs import compile_system_prompt
from orchestrator.memfs.compiler import clear_render_cache
from orchestrator.memfs.reader import DEFAULT_POOL

CORE_COUNTS = (5, 20, 100)
DEFERRED_COUNTS = (0, 100, 1_000, 10_000)
FILES_PER_DIRECTORY = 100
WARM_RUNS = 25
BASELINE_RUNS = 3
NOW = datetime(2026, 9, 1, 13, 5, 9, tzinfo=UTC)
RAW_SYSTEM = "You are a helpful agent.\n\n{CORE_MEMORY}"


def _env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("GIT_")}
    env.update(
        GIT_CONFIG_NOSYSTEM="1",
        GIT_CONFIG_GLOBAL=os.devnull,
        GIT_AUTHOR_NAME="bench",
        GIT_AUTHOR_EMAIL="bench@reverie.invalid",
        GIT_COMMITTER_NAME="bench",
        GIT_COMMITTER_EMAIL="bench@reverie.invalid",
    )
    return env


def _core_text(i: int) -> str:
    body = "\n".join(f"- fact {i}.{n}: the user prefers tabs, short answers and tea" for n in range(12))
    return f"---\nname: core-{i}\ndescription: Core memory file number {i}\n---\n{body}\n"


def _files(core: int, deferred: int) -> dict[str, str]:
    files = {"MEMORY.md": "# Memory\n\nOverview of everything I remember.\n"}
    for i in range(core):
        files[f"core-{i:03d}.md"] = _core_text(i)
    for i in range(deferred):
        directory = f"topic-{i // FILES_PER_DIRECTORY:03d}"
        files.setdefault(f"{directory}/MEMORY.md", f"# {directory}\n")
        files[f"{directory}/note-{i:05d}.md"] = f"---\nname: note-{i}\ndescription: Deferred note {i}\n---\nDetails {i}.\n"
    return files


def _build(root: Path, core: int, deferred: int) -> Path:
    repo = root / f"c{core}-d{deferred}"
    repo.mkdir()
    subprocess.run(["git", "init", "-q", "-b", "main"], cwd=repo, check=True, env=_env())
    stream = bytearray(b"commit refs/heads/main\ncommitter bench <bench@reverie.invalid> 0 +0000\ndata 5\nbench\n")
    for path, text in _files(core, deferred).items():
        data = text.encode("utf-8")
        stream += f"M 100644 inline {path}\ndata {len(data)}\n".encode() + data + b"\n"
    stream += b"\n"
    subprocess.run(["git", "fast-import", "--quiet"], cwd=repo, input=bytes(stream), check=True, env=_env())
    return repo


def _compile(repo: Path) -> str:
    return compile_system_prompt(repo, RAW_SYSTEM, agent_id="bench", conversation_id="c", now=NOW).content


def _reverie(repo: Path) -> tuple[float, float, float]:
    """(warm, warm without the render cache, cold) seconds per compile."""
    DEFAULT_POOL.close_all()
    clear_render_cache()
    start = time.perf_counter()
    _compile(repo)
    cold = time.perf_counter() - start
    warm, uncached = [], []
    for _ in range(WARM_RUNS):
        start = time.perf_counter()
        _compile(repo)
        warm.append(time.perf_counter() - start)
        clear_render_cache()
        start = time.perf_counter()
        _compile(repo)
        uncached.append(time.perf_counter() - start)
    return statistics.median(warm), statistics.median(uncached), cold


def _baseline_once(repo: Path) -> None:
    env = _env()
    subprocess.run(["git", "rev-parse", "--verify", "HEAD"], cwd=repo, capture_output=True, check=True, env=env)
    listing = subprocess.run(["git", "ls-tree", "-r", "--name-only", "HEAD"], cwd=repo, capture_output=True, check=True, env=env)
    paths = [p for p in listing.stdout.decode().split("\n") if p.endswith(".md")]
    for path in paths:
        parts = path.split("/")
        if len(parts) == 1 or (len(parts) == 2 and parts[1] == "MEMORY.md" and parts[0] != "skills"):
            subprocess.run(["git", "show", f"HEAD:{path}"], cwd=repo, capture_output=True, check=True, env=env)


def _baseline(repo: Path) -> float:
    timings = []
    for _ in range(BASELINE_RUNS):
        start = time.perf_counter()
        _baseline_once(repo)
        timings.append(time.perf_counter() - start)
    return statistics.median(timings)


def main() -> int:
    results: dict[tuple[int, int], tuple[float, float, float]] = {}
    with tempfile.TemporaryDirectory(prefix="reverie-bench-") as scratch:
        root = Path(scratch)
        print("MemFS v2 compile benchmark, times in ms.")
        print(f"warm = steady-state per-compile time (median of {WARM_RUNS} compiles on a running object reader;")
        print("       HEAD is resolved through git every time, rendering comes from the per-tree cache);")
        print("re-render = same but render cache cleared before each compile; cold = first compile, reader not")
        print(f"started; baseline = reference-style git subprocesses (median of {BASELINE_RUNS}); speed-up = baseline / warm")
        print()
        header = (
            f"{'core':>5} {'deferred':>9} {'warm':>8} {'re-render':>10} {'cold':>8} {'baseline':>10} {'speed-up':>9}"
            f" {'vs re-render':>13}"
        )
        print(header)
        print("-" * len(header))
        for core in CORE_COUNTS:
            for deferred in DEFERRED_COUNTS:
                repo = _build(root, core, deferred)
                warm, uncached, cold = _reverie(repo)
                base = _baseline(repo)
                results[core, deferred] = (warm, uncached, base)
                print(
                    f"{core:>5} {deferred:>9,} {warm * 1e3:>8.2f} {uncached * 1e3:>10.2f} {cold * 1e3:>8.2f}"
                    f" {base * 1e3:>10.1f} {base / warm:>8.0f}x {base / uncached:>12.0f}x",
                    flush=True,
                )
        DEFAULT_POOL.close_all()
    print()
    ok = True
    warm, uncached, base = results[20, 1_000]
    speedup = base / warm
    passed = speedup >= 10
    ok &= passed
    print(
        f"target 1: 20 core + 1,000 deferred, reverie >= 10x faster than baseline: {speedup:.0f}x -> {'PASS' if passed else 'FAIL'}"
        f" (re-render: {base / uncached:.0f}x)"
    )
    for core in CORE_COUNTS:
        growth = results[core, 10_000][0] / results[core, 0][0]
        passed = growth < 3
        ok &= passed
        rerender = results[core, 10_000][1] / results[core, 0][1]
        print(
            f"target 2: {core} core, reverie warm growth 0 -> 10,000 deferred < 3x: {growth:.2f}x -> {'PASS' if passed else 'FAIL'}"
            f" (re-render growth, informational: {rerender:.2f}x)"
        )
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main())

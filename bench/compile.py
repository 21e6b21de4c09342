"""Benchmark the MemFS v2 compiler against a reference-style reader, cold and warm, interleaved.

For core files 5/20/100 x deferred files 0/100/1,000/10,000 it builds one v2 repository (with
``git fast-import``) and measures, per repeat and in rotating order so a busy machine's drift hits
every side alike:

* cold: the first compile of the repository in this process: render cache cleared and the reader
  pool emptied, so the libgit2 handle is opened afresh and no tree or blob is cached;
* warm: the reader is open and its object caches are filled, but the render cache is cleared
  before each compile, so every root file and child index is collected, parsed, sorted and
  rendered again (a compile right after a commit); not a cache hit;
* cached (informational): the steady state, render cache hit, HEAD resolved every time;
* baseline: what the reference does per compile: ``git rev-parse --verify HEAD``,
  ``git ls-tree -r --name-only HEAD``, then one ``git show HEAD:<path>`` per rendered file.

Medians over ``--repeats`` repeats (warm and cached: the median of several compiles inside each).
Targets (exit status 1 when one is missed): at 20 core + 1,000 deferred, cold >= 25x and warm
>= 100x faster than the baseline; the steady state (cached) grows < 3x from 0 to 10,000 deferred
files per core count (warm's growth is printed: re-rendering 100 child indexes costs what it costs).
Importing pygit2 (once per process, before any compile) is printed apart.

Where a cold compile goes (20 core + 1,000 deferred, measured while writing this): opening the
libgit2 handle and resolving ``HEAD`` ~0.15 ms; the rest is inflating the root tree, the 20 core
blobs and the 10 folder look-ups from the pack plus parsing and ICU-sorting the records, which the
warm column shows without the inflating. The old reader's cold cost was starting ``git cat-file``.
"""
from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from orchestrator.memfs import compile_system_prompt
from orchestrator.memfs.compiler import clear_render_cache
from orchestrator.memfs.repopool import REPOS

CORE_COUNTS = (5, 20, 100)
DEFERRED_COUNTS = (0, 100, 1_000, 10_000)
FILES_PER_DIRECTORY = 100
WARM_RUNS = 9
REPEATS = 5
COLD_TARGET = 25
WARM_TARGET = 100
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


def _timed(fn: Callable[[], object]) -> float:
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start


def _cold(repo: Path) -> float:
    REPOS.close_all()
    REPOS.close_all()
    clear_render_cache()
    return _timed(lambda: _compile(repo))


def _warm(repo: Path) -> float:
    _compile(repo)
    timings = []
    for _ in range(WARM_RUNS):
        clear_render_cache()
        timings.append(_timed(lambda: _compile(repo)))
    return statistics.median(timings)


def _cached(repo: Path) -> float:
    _compile(repo)
    return statistics.median(_timed(lambda: _compile(repo)) for _ in range(WARM_RUNS))


def _baseline(repo: Path) -> float:
    env = _env()

    def once() -> None:
        subprocess.run(["git", "rev-parse", "--verify", "HEAD"], cwd=repo, capture_output=True, check=True, env=env)
        listing = subprocess.run(
            ["git", "ls-tree", "-r", "--name-only", "HEAD"], cwd=repo, capture_output=True, check=True, env=env
        )
        for path in (p for p in listing.stdout.decode().split("\n") if p.endswith(".md")):
            parts = path.split("/")
            if len(parts) == 1 or (len(parts) == 2 and parts[1] == "MEMORY.md" and parts[0] != "skills"):
                subprocess.run(["git", "show", f"HEAD:{path}"], cwd=repo, capture_output=True, check=True, env=env)

    return _timed(once)


_SIDES: dict[str, Callable[[Path], float]] = {"baseline": _baseline, "cold": _cold, "warm": _warm, "cached": _cached}


def _measure(repo: Path, repeats: int) -> dict[str, float]:
    """Median per side over ``repeats`` rounds, the order of the sides rotated every round."""
    names = list(_SIDES)
    samples: dict[str, list[float]] = {name: [] for name in names}
    for round_ in range(repeats):
        for name in names[round_ % len(names) :] + names[: round_ % len(names)]:
            samples[name].append(_SIDES[name](repo))
    return {name: statistics.median(values) for name, values in samples.items()}


def _import_cost() -> float:
    """Seconds ``import pygit2`` adds to an interpreter start (median of 5, informational)."""

    def start(code: str) -> float:
        return _timed(lambda: subprocess.run([sys.executable, "-c", code], check=True))

    return statistics.median(start("import pygit2") - start("pass") for _ in range(5))


def main(repeats: int) -> int:
    results: dict[tuple[int, int], dict[str, float]] = {}
    print(f"MemFS v2 compile benchmark, ms, medians of {repeats} interleaved repeats (see the docstring).")
    print(f"import pygit2 (once per process, before the first compile): {_import_cost() * 1e3:.1f} ms")
    print()
    header = (
        f"{'core':>5} {'deferred':>9} {'baseline':>9} {'cold':>8} {'warm':>8} {'cached':>8}"
        f" {'cold x':>8} {'warm x':>8} {'cached x':>9}"
    )
    print(header)
    print("-" * len(header))
    with tempfile.TemporaryDirectory(prefix="reverie-bench-") as scratch:
        root = Path(scratch)
        for core in CORE_COUNTS:
            for deferred in DEFERRED_COUNTS:
                repo = _build(root, core, deferred)
                got = results[core, deferred] = _measure(repo, repeats)
                base = got["baseline"]
                print(
                    f"{core:>5} {deferred:>9,} {base * 1e3:>9.1f} {got['cold'] * 1e3:>8.2f} {got['warm'] * 1e3:>8.2f}"
                    f" {got['cached'] * 1e3:>8.2f} {base / got['cold']:>7.0f}x {base / got['warm']:>7.0f}x"
                    f" {base / got['cached']:>8.0f}x",
                    flush=True,
                )
        REPOS.close_all()
    print()
    return _verdicts(results)


def _verdicts(results: dict[tuple[int, int], dict[str, float]]) -> int:
    ok = True
    got = results[20, 1_000]
    for side, target in (("cold", COLD_TARGET), ("warm", WARM_TARGET)):
        ratio = got["baseline"] / got[side]
        ok &= ratio >= target
        print(f"target: 20 core + 1,000 deferred, {side} >= {target}x the baseline: {ratio:.0f}x -> {_pass(ratio >= target)}")
    for core in CORE_COUNTS:
        growth = results[core, 10_000]["cached"] / results[core, 0]["cached"]
        warm = results[core, 10_000]["warm"] / results[core, 0]["warm"]
        ok &= growth < 3
        print(
            f"target: {core} core, cached growth 0 -> 10,000 deferred < 3x: {growth:.2f}x -> {_pass(growth < 3)}"
            f" (warm growth, informational: {warm:.2f}x)"
        )
    return 0 if ok else 1


def _pass(ok: bool) -> str:
    return "PASS" if ok else "FAIL"


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=REPEATS)
    raise SystemExit(main(parser.parse_args().repeats))

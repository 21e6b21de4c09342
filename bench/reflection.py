"""One reflection cycle, reverie against the plain git CLI sequence, interleaved.

A cycle: the parent moves (untimed, so the rebase does real work), then, timed: a worktree on a new
branch at ``HEAD~1``, one commit in it (the agent's own ``git commit``, the same command on both
sides), rebase onto the parent, fast-forward the parent, remove the worktree and the branch.
The plain side is those six git commands; reverie's is ``create_worktree`` + ``finalize_worktree``
(merge lock, clean-check, pin ref, rebase, M8 audit, fast-forward, cleanup).

The two sides alternate in ABBA order, so drift of a shared, busy machine hits both alike; each
side runs ``--cycles`` times per repeat for ``--repeats`` repeats, and the table shows medians and
the ratio of medians (target: reverie <= 0.5x plain, P2). Every git process either side
starts is counted by a logging ``git`` put first on ``PATH`` for the run.

Run: ``.venv/bin/python bench/reflection.py [--cycles N] [--repeats R]``.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import anyio

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from orchestrator.memfs.merge import finalize_worktree
from orchestrator.memfs.worktrees import create_worktree

_ENV = {
    "GIT_CONFIG_NOSYSTEM": "1",
    "GIT_CONFIG_GLOBAL": os.devnull,
    "GIT_AUTHOR_NAME": "bench",
    "GIT_AUTHOR_EMAIL": "bench@reverie.invalid",
    "GIT_COMMITTER_NAME": "bench",
    "GIT_COMMITTER_EMAIL": "bench@reverie.invalid",
}
TARGET = 0.5


def _git(cwd: Path, *args: str) -> None:
    subprocess.run(["git", "-c", "core.hooksPath=/dev/null", *args], cwd=cwd, check=True, capture_output=True)


def _note(name: str, body: str) -> str:
    return f"---\nname: {name}\ndescription: bench\n---\n{body}\n"


def _make_repo(path: Path) -> None:
    path.mkdir(parents=True)
    _git(path, "init", "-q", "-b", "main")
    (path / "MEMORY.md").write_text("# Memory\n")
    (path / "persona.md").write_text(_note("persona", "p"))
    (path / "human.md").write_text(_note("human", "h"))
    _git(path, "add", "-A")
    _git(path, "commit", "-q", "-m", "init")


def _move_parent(repo: Path, i: int) -> None:
    (repo / "human.md").write_text(_note("human", f"main {i}"))
    _git(repo, "commit", "-q", "-am", f"main {i}")


class _Counter:
    """A logging ``git`` first on PATH: one line per git process anyone in this run starts."""

    def __init__(self, folder: Path) -> None:
        real = shutil.which("git")
        assert real is not None, "git is not on PATH"
        folder.mkdir()
        self.log = folder / "calls.log"
        script = folder / "git"
        script.write_text(f'#!/bin/sh\necho "$*" >> "{self.log}"\nexec "{real}" "$@"\n')
        script.chmod(0o755)
        os.environ["PATH"] = f"{folder}{os.pathsep}{os.environ['PATH']}"

    def count(self) -> int:
        return len(self.log.read_text().splitlines()) if self.log.exists() else 0


def _plain_cycle(repo: Path, root: Path, i: int) -> float:
    wt, branch = root / f"plain-{i}", f"plain/{i}"
    _move_parent(repo, i)
    started = time.perf_counter()
    _git(repo, "worktree", "add", "-q", "-b", branch, str(wt), "HEAD~1")
    (wt / "persona.md").write_text(_note("persona", f"reflection {i}"))
    _git(wt, "commit", "-q", "-am", f"reflect {i}")
    _git(wt, "rebase", "-q", "main")
    _git(repo, "merge", "--ff-only", "-q", branch)
    _git(repo, "worktree", "remove", "--force", str(wt))
    _git(repo, "branch", "-q", "-d", branch)
    return time.perf_counter() - started


async def _reverie_cycle(repo: Path, root: Path, i: int) -> float:
    await anyio.to_thread.run_sync(_move_parent, repo, i)
    started = time.perf_counter()
    wt = await create_worktree(repo, agent_id="bench", revision="HEAD~1", root=root)
    await anyio.to_thread.run_sync(lambda: (wt.path / "persona.md").write_text(_note("persona", f"reflection {i}")))
    await anyio.to_thread.run_sync(lambda: _git(wt.path, "commit", "-q", "-am", f"reflect {i}"))
    outcome = await finalize_worktree(repo, wt)
    assert outcome.status == "merged", outcome
    return time.perf_counter() - started


async def _main(cycles: int, repeats: int) -> int:
    os.environ.update(_ENV)
    times: dict[str, list[float]] = {"plain": [], "reverie": []}
    processes: dict[str, list[int]] = {"plain": [], "reverie": []}
    with tempfile.TemporaryDirectory(prefix="reverie-bench-") as tmp:
        base = Path(tmp)
        counter = _Counter(base / "bin")
        for repeat in range(repeats):
            plain_repo, ours_repo = base / f"plain{repeat}", base / f"ours{repeat}"
            _make_repo(plain_repo)
            _make_repo(ours_repo)
            for i in range(cycles):
                order = ("plain", "reverie") if (i + repeat) % 4 in (0, 3) else ("reverie", "plain")
                for side in order:
                    before = counter.count()
                    if side == "plain":
                        elapsed = await anyio.to_thread.run_sync(_plain_cycle, plain_repo, base / "wt", i)
                    else:
                        elapsed = await _reverie_cycle(ours_repo, base / "wt", i)
                    times[side].append(elapsed)
                    processes[side].append(counter.count() - before - 1)  # the untimed parent move
    plain, ours = statistics.median(times["plain"]), statistics.median(times["reverie"])
    ratio = ours / plain
    print(f"reflection cycle, {repeats} x {cycles} cycles per side, interleaved ABBA; times in ms")
    print(f"{'implementation':<30}{'p50':>9}{'p25':>9}{'p75':>9}{'git processes':>15}")
    for side, label in (("plain", "plain git CLI"), ("reverie", "reverie (locked, audited)")):
        q = statistics.quantiles(times[side], n=4) if len(times[side]) > 1 else [times[side][0]] * 3
        print(
            f"{label:<30}{statistics.median(times[side]) * 1e3:>9.1f}{q[0] * 1e3:>9.1f}{q[2] * 1e3:>9.1f}"
            f"{statistics.median(processes[side]):>15.0f}"
        )
    verdict = "PASS" if ratio <= TARGET else "FAIL"
    print(f"ratio reverie/plain (medians): {ratio:.2f}x (target <= {TARGET}x) -> {verdict}")
    return 0 if ratio <= TARGET else 1


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cycles", type=int, default=10)
    parser.add_argument("--repeats", type=int, default=3)
    arguments = parser.parse_args()
    raise SystemExit(anyio.run(_main, arguments.cycles, arguments.repeats))

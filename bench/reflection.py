"""One reflection cycle, reverie vs the plain git CLI: worktree add, commit, rebase, fast-forward,
worktree remove. The parent moves before each merge so the rebase does real work.

Run: ``.venv/bin/python bench/reflection.py [--cycles N]``. Prints p50 per implementation and the ratio.
"""

from __future__ import annotations

import argparse
import os
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


async def _main(cycles: int) -> None:
    os.environ.update(_ENV)
    with tempfile.TemporaryDirectory(prefix="reverie-bench-") as tmp:
        base = Path(tmp)
        plain_repo, ours_repo = base / "plain", base / "ours"
        _make_repo(plain_repo)
        _make_repo(ours_repo)
        plain, ours = [], []
        for i in range(cycles):
            plain.append(await anyio.to_thread.run_sync(_plain_cycle, plain_repo, base / "wt", i))
            ours.append(await _reverie_cycle(ours_repo, base / "wt", i))
    p_plain, p_ours = statistics.median(plain) * 1000, statistics.median(ours) * 1000
    print(f"{'implementation':<28}{'p50 ms':>10}")
    print(f"{'plain git CLI':<28}{p_plain:>10.1f}")
    print(f"{'reverie (locked, audited)':<28}{p_ours:>10.1f}")
    print(f"ratio reverie/plain: {p_ours / p_plain:.2f}x over {cycles} cycles")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cycles", type=int, default=20)
    anyio.run(_main, parser.parse_args().cycles)

"""Merge-back on a full disk (a small tmpfs, so root only): ``failed``, nothing changed, and the same
branch merges once space is back. libgit2 reports a full disk as ``OSError``; merge-back and the
worktree seam must turn it into their own outcome and error, never let it escape."""

from __future__ import annotations

import os
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path

import anyio
import anyio.to_thread
import pytest

from orchestrator.app.stress_faults import fill_disk
from orchestrator.memfs.errors import GitError
from orchestrator.memfs.locks import merge_lock
from orchestrator.memfs.merge import merge_back
from orchestrator.memfs.resolution import Conflict
from orchestrator.memfs.worktrees import create_worktree
from tests.memfs.reflection_helpers import commit_file, git, make_repo, note, write

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="mounting the small tmpfs that fills up needs root")


@pytest.fixture
def disk(tmp_path: Path) -> Iterator[Path]:
    mount = tmp_path / "disk"
    mount.mkdir()
    done = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=8m", "tmpfs", str(mount)], capture_output=True, text=True)
    if done.returncode != 0:
        pytest.skip(f"this machine cannot mount a tmpfs: {done.stderr.strip()}")
    try:
        yield mount
    finally:
        subprocess.run(["umount", str(mount)], check=False)


async def _git(cwd: Path, *args: str) -> str:
    return await anyio.to_thread.run_sync(lambda: git(cwd, *args))


@pytest.mark.anyio
async def test_a_full_disk_fails_the_merge_cleanly_and_the_branch_merges_after(disk: Path) -> None:
    repo = await anyio.to_thread.run_sync(make_repo, disk / "memory")
    wt = await create_worktree(repo, agent_id="a", root=disk / "worktrees")
    for i in range(3):
        await anyio.to_thread.run_sync(commit_file, wt.path, f"notes/w{i}.md", note(f"w{i}", "x" * 2000), f"w{i}")
    await anyio.to_thread.run_sync(commit_file, repo, "notes/hot.md", note("hot", "moved"), "main moves on")
    head = await _git(repo, "rev-parse", "HEAD")
    filler = await anyio.to_thread.run_sync(fill_disk, disk)
    full = await merge_back(repo, wt.path, wt.branch)
    with pytest.raises(GitError):
        await create_worktree(repo, agent_id="a", root=disk / "worktrees")
    await anyio.Path(filler).unlink()
    assert full.status == "failed" and "No space left" in full.errors[0]
    assert await _git(repo, "rev-parse", "HEAD") == head
    assert await _git(repo, "status", "--porcelain") == ""
    again = await merge_back(repo, wt.path, wt.branch)
    assert again.status == "merged" and len(again.commits) == 3


def _leave_free(filler: Path, free: int) -> None:
    with open(filler, "r+b") as handle:
        handle.truncate(max(0, filler.stat().st_size - free))


def _consistent(repo: Path, worktree: Path, branch: str, messages: dict[str, str], in_head: bool) -> list[str]:
    """What is wrong after a merge on a full disk and its retry (blocking): a rebase left in
    progress, a checkout not clean, a commit missing, merged twice or folded into another."""
    wrong = []
    if (Path(git(worktree, "rev-parse", "--path-format=absolute", "--git-dir").strip()) / "rebase-merge").exists():
        wrong.append("the worktree is left mid-rebase")
    for where in (repo, worktree):
        if dirty := git(where, "status", "--porcelain").strip():
            wrong.append(f"{where.name} not clean: {dirty!r}")
    source = "main" if in_head else branch
    found: dict[str, list[list[str]]] = {}
    for line in git(repo, "log", "--format=%H %s", source).splitlines():
        sha, subject = line.split(" ", 1)
        found.setdefault(subject, []).append(git(repo, "diff-tree", "--no-commit-id", "--name-only", "-r", sha).split())
    for message, rel in messages.items():
        if found.get(message) != [[rel]]:
            wrong.append(f"{message} in {source}: {found.get(message)} (its own change: {rel})")
    return wrong


@pytest.mark.anyio
@pytest.mark.parametrize("anyio_backend", ["trio"])  # the disk is the subject, not the event loop
@pytest.mark.parametrize("conflict", [False, True], ids=["clean", "conflict"])
async def test_a_merge_cut_short_anywhere_by_a_full_disk_leaves_nothing_folded_or_half_done(
    disk: Path, conflict: bool
) -> None:
    """O9: the disk fills with more and more room left (8 KB steps) until the merge gets
    through, so it is cut short at every stage: git's rebase mid-pick, its abort, the resolver's
    turn, the parent's fast-forward mid-checkout. Each time, once space is back and the branch is
    merged again: the worktree is not left mid-rebase, both checkouts are clean (no file of a
    half-done checkout that a ``commit -a`` would sweep up), and every commit is in ``HEAD`` (or
    still on its kept branch) once, with its own change: none lost, none folded into a neighbour."""

    async def resolver(c: Conflict) -> None:
        for rel in c.files:
            await anyio.to_thread.run_sync(write, c.worktree / rel, note("hot", f"both {c.subject}"))
            await _git(c.worktree, "add", rel)

    seen: list[str] = []
    for n, free in enumerate(range(0, 256 * 1024, 8 * 1024)):
        repo = await anyio.to_thread.run_sync(make_repo, disk / f"m{n}")
        wt = await create_worktree(repo, agent_id="a", root=disk / f"w{n}")
        messages = {}
        for i in range(5):
            rel = "notes/hot.md" if conflict and i % 2 == 0 else f"notes/w{i}.md"
            text = note(Path(rel).stem, f"branch {i} " + "x" * 2000)
            await anyio.to_thread.run_sync(commit_file, wt.path, rel, text, f"w{i}")
            messages[f"w{i}"] = rel
        await anyio.to_thread.run_sync(commit_file, repo, "notes/hot.md", note("hot", "moved"), "main moves on")
        filler = await anyio.to_thread.run_sync(fill_disk, disk)
        await anyio.to_thread.run_sync(_leave_free, filler, free)
        full = await merge_back(repo, wt.path, wt.branch, resolver=resolver if conflict else None)
        await anyio.Path(filler).unlink()
        seen.append(full.status)
        again = full if full.status in {"merged", "resolved", "kept"} else await merge_back(
            repo, wt.path, wt.branch, resolver=resolver if conflict else None
        )
        assert again.status in {"merged", "resolved", "kept"}, (free, full, again)
        wrong = await anyio.to_thread.run_sync(_consistent, repo, wt.path, wt.branch, messages, again.in_head)
        assert wrong == [], (free, full.status, full.errors, again.status)
        if full.status in {"merged", "resolved"}:
            break
        await anyio.to_thread.run_sync(shutil.rmtree, disk / f"m{n}")
        await anyio.to_thread.run_sync(shutil.rmtree, disk / f"w{n}")
    assert seen[0] == "failed" and seen[-1] in {"merged", "resolved"}, seen


@pytest.mark.anyio
async def test_the_lock_owner_record_leaves_no_half_written_file_on_a_full_disk(disk: Path) -> None:
    """The owner record beside the repository lock is written to a temporary file and renamed; on a
    full disk that write fails, and the empty temporary file must not pile up in ``.git``."""
    repo = await anyio.to_thread.run_sync(make_repo, disk / "memory")
    filler = await anyio.to_thread.run_sync(fill_disk, disk)
    async with merge_lock(repo):
        pass
    await anyio.Path(filler).unlink()
    assert [p.name async for p in anyio.Path(repo / ".git").glob("reverie-merge.owner.json*")] == []

"""Merge-back on a full disk (a small tmpfs, so root only): ``failed``, nothing changed, and the same
branch merges once space is back. libgit2 reports a full disk as ``OSError``; merge-back and the
worktree seam must turn it into their own outcome and error, never let it escape."""

from __future__ import annotations

import os
import subprocess
from collections.abc import Iterator
from pathlib import Path

import anyio
import anyio.to_thread
import pytest

from orchestrator.app.stress_faults import fill_disk
from orchestrator.memfs.git import GitError
from orchestrator.memfs.merge import merge_back
from orchestrator.memfs.worktrees import create_worktree
from tests.memfs.reflection_helpers import commit_file, git, make_repo, note

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

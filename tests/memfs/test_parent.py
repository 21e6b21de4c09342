"""The parent's branch across a subagent's run: real git, moves made as a subagent or the main
agent would make them, and what reverie puts back."""

from __future__ import annotations

from pathlib import Path

import anyio
import pytest

from orchestrator.memfs import parent
from orchestrator.memfs.worktrees import create_worktree
from tests.memfs.reflection_helpers import commit_file, git, make_repo, note

pytestmark = pytest.mark.anyio


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    return make_repo(tmp_path / "memory")


async def _git(cwd: Path, *args: str) -> str:
    return (await anyio.to_thread.run_sync(lambda: git(cwd, *args))).strip()


async def _commit(cwd: Path, rel: str, message: str) -> str:
    return await anyio.to_thread.run_sync(commit_file, cwd, rel, note(message, message), message)


async def test_the_main_agents_commits_during_the_run_are_not_a_displacement(repo: Path) -> None:
    wt = await create_worktree(repo, agent_id="a")
    watched = await parent.watch(wt.path, "reflection-x")
    await _commit(wt.path, "notes/own.md", "own")
    agent = await _commit(repo, "notes/a.md", "agent")
    assert await parent.settle(watched, own_branch=wt.branch) is None
    assert await _git(repo, "rev-parse", "main") == agent


async def test_a_rewound_main_is_put_back_on_the_last_tip_seen_and_kept_on_a_ref(repo: Path) -> None:
    first = await _git(repo, "rev-list", "--max-parents=0", "HEAD")
    wt = await create_worktree(repo, agent_id="a")
    watched = await parent.watch(wt.path, "reflection-x")
    agent = await _commit(repo, "notes/a.md", "agent")
    await anyio.to_thread.run_sync(parent.witness, repo)  # as after the main agent's command
    await _git(wt.path, "update-ref", "refs/heads/main", first)
    displaced = await parent.settle(watched, own_branch=wt.branch)
    assert displaced is not None and (displaced.found, displaced.restored) == (first, agent)
    assert await _git(repo, "rev-parse", "main") == agent
    assert await _git(repo, "rev-parse", "refs/reverie/displaced/reflection-x") == first
    assert await _git(repo, "status", "--porcelain") == ""
    assert "reflection-x moved main" in displaced.message


async def test_own_commits_pushed_onto_main_without_a_merge_are_taken_back(repo: Path) -> None:
    head = await _git(repo, "rev-parse", "HEAD")
    wt = await create_worktree(repo, agent_id="a")
    watched = await parent.watch(wt.path, "reflection-x")
    own = await _commit(wt.path, "notes/own.md", "own")
    await _git(wt.path, "update-ref", "refs/heads/main", own)
    displaced = await parent.settle(watched, own_branch=wt.branch)
    assert displaced is not None and (displaced.found, displaced.restored) == (own, head)
    assert await _git(repo, "rev-parse", "main") == head and not (repo / "notes" / "own.md").exists()
    assert await _git(repo, "rev-parse", wt.branch) == own

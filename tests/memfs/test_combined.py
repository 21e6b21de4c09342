"""Merge-back validates the candidate HEAD as a whole: each-valid edits that break the limits
together are kept as ``invalid-combined``, never fast-forwarded."""

from __future__ import annotations

import json
from pathlib import Path

import anyio
import anyio.to_thread
import pytest

from orchestrator.memfs.combined import REASON_INVALID_COMBINED
from orchestrator.memfs.merge import merge_back
from orchestrator.memfs.resolution import Conflict
from orchestrator.memfs.validator import validate_head
from orchestrator.memfs.worktrees import create_worktree
from tests.memfs.reflection_helpers import commit_file, git, make_repo, note


def _core_size(repo: Path) -> int:
    return sum(len(p.read_text(encoding="utf-8")) for p in repo.glob("*.md"))


def _limited_repo(path: Path, budget: int) -> Path:
    repo = make_repo(path)
    config = {"version": 1, "maxCoreMemoryCharacters": _core_size(repo) + budget}
    commit_file(repo, ".memfs.config.json", json.dumps(config) + "\n", "limit core memory")
    return repo


def _core_note(name: str, size: int) -> str:
    text = note(name, "")
    return note(name, "x" * (size - len(text)))


async def _git(cwd: Path, *args: str) -> str:
    return await anyio.to_thread.run_sync(lambda: git(cwd, *args))


@pytest.mark.anyio
@pytest.mark.parametrize("policy", ["keep", "resolve"])
async def test_two_valid_branches_that_overflow_core_memory_together_keep_the_second(
    tmp_path: Path, policy: str
) -> None:
    repo = await anyio.to_thread.run_sync(_limited_repo, tmp_path / "memory", 600)
    first = await create_worktree(repo, agent_id="a")
    second = await create_worktree(repo, agent_id="a")
    await anyio.to_thread.run_sync(commit_file, first.path, "alpha.md", _core_note("alpha", 400), "alpha")
    await anyio.to_thread.run_sync(commit_file, second.path, "beta.md", _core_note("beta", 400), "beta")
    called: list[Conflict] = []

    async def resolver(conflict: Conflict) -> None:
        called.append(conflict)

    chosen = resolver if policy == "resolve" else None
    merged = await merge_back(repo, first.path, first.branch, resolver=chosen)
    head = (await _git(repo, "rev-parse", "HEAD")).strip()
    kept = await merge_back(repo, second.path, second.branch, resolver=chosen)
    assert merged.status == "merged"
    assert (kept.status, kept.reason_code, kept.reason) == ("kept", "invalid-combined", REASON_INVALID_COMBINED)
    assert any("maxCoreMemoryCharacters" in error for error in kept.errors)
    assert called == []
    assert (await _git(repo, "rev-parse", "HEAD")).strip() == head
    assert (await anyio.to_thread.run_sync(validate_head, repo)).ok
    assert "beta" in await _git(repo, "log", "--format=%s", second.branch)


@pytest.mark.anyio
async def test_a_branch_invalid_on_its_own_is_plain_invalid(tmp_path: Path) -> None:
    repo = await anyio.to_thread.run_sync(_limited_repo, tmp_path / "memory", 600)
    other = await create_worktree(repo, agent_id="a")
    wt = await create_worktree(repo, agent_id="a")
    await anyio.to_thread.run_sync(commit_file, other.path, "notes/x.md", note("x", "moves HEAD"), "x")
    assert (await merge_back(repo, other.path, other.branch)).status == "merged"
    await anyio.to_thread.run_sync(commit_file, wt.path, "big.md", _core_note("big", 900), "too big alone")
    outcome = await merge_back(repo, wt.path, wt.branch)
    assert (outcome.status, outcome.reason_code) == ("kept", "invalid")

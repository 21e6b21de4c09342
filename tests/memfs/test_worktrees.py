from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

import anyio
import anyio.to_thread
import pytest
from anyio import CancelScope
from anyio import Path as AsyncPath

from orchestrator.base.paths import worktrees_root
from orchestrator.memfs.errors import GitError
from orchestrator.memfs.worktrees import (
    branch_for,
    create_worktree,
    id_from_branch,
    list_reflections,
    new_worktree_id,
    parse_worktree_list,
    remove_worktree,
)
from tests.memfs.reflection_helpers import commit_file, git, make_repo, note


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    return make_repo(tmp_path / "memory")


def test_id_format_is_utc_basic_iso_with_token() -> None:
    moment = datetime(2026, 10, 9, 17, 42, 10, tzinfo=UTC)
    assert new_worktree_id(moment, "3f2a9c1d") == "20261009T174210Z-3f2a9c1d"
    assert len(new_worktree_id().split("-")[1]) == 8
    with pytest.raises(ValueError, match="8 lowercase hex"):
        new_worktree_id(moment, "XYZ")


def test_branch_names_round_trip_and_reject_foreign_names() -> None:
    wid = "20261009T174210Z-3f2a9c1d"
    assert branch_for(wid) == f"reverie/reflection/{wid}"
    assert id_from_branch(f"refs/heads/reverie/reflection/{wid}") == wid
    assert id_from_branch("reverie/reflection/20261009174210-3f2a9c1d") == "20261009174210-3f2a9c1d"
    assert id_from_branch("letta/reflection/20261009174210-3f2a9c1d") is None
    assert id_from_branch("reverie/reflection/nope") is None
    with pytest.raises(ValueError, match="invalid worktree id"):
        branch_for("bad id")


def test_parse_worktree_list_maps_branches_to_paths() -> None:
    raw = "worktree /m\0HEAD abc\0branch refs/heads/main\0\0worktree /w\0HEAD def\0branch refs/heads/reverie/x\0\0"
    assert parse_worktree_list(raw) == {"main": Path("/m"), "reverie/x": Path("/w")}


@pytest.mark.anyio
async def test_create_list_remove(repo: Path) -> None:
    head = (await anyio.to_thread.run_sync(git, repo, "rev-parse", "HEAD")).strip()
    wt = await create_worktree(repo, agent_id="agent-1")
    assert wt.base_revision == head
    assert wt.path == worktrees_root() / "agent-1" / f"reflection-{wt.id}"
    assert await AsyncPath(wt.path / "MEMORY.md").exists()
    assert wt.branch == f"reverie/reflection/{wt.id}"

    listed = await list_reflections(repo)
    assert [(b.branch, b.ahead, b.merged, b.worktree) for b in listed] == [(wt.branch, 0, True, wt.path)]

    sha = await anyio.to_thread.run_sync(commit_file, wt.path, "notes/a.md", note("a", "x"), "add a")
    listed = await list_reflections(repo)
    assert (listed[0].tip, listed[0].ahead, listed[0].merged) == (sha, 1, False)

    await remove_worktree(repo, wt)
    assert not await AsyncPath(wt.path).exists()
    listed = await list_reflections(repo)
    assert [(b.branch, b.tip, b.worktree) for b in listed] == [(wt.branch, sha, None)]
    porcelain = await anyio.to_thread.run_sync(git, repo, "worktree", "list", "--porcelain")
    assert str(wt.path) not in porcelain
    await remove_worktree(repo, wt)  # idempotent


@pytest.mark.anyio
async def test_create_at_revision_and_unknown_revision(repo: Path) -> None:
    first = (await anyio.to_thread.run_sync(git, repo, "rev-parse", "HEAD~1")).strip()
    wt = await create_worktree(repo, agent_id="a", revision=first, kind="compaction")
    assert wt.base_revision == first
    assert wt.branch.startswith("reverie/compaction/")
    assert not await AsyncPath(wt.path / "notes").exists()
    with pytest.raises(GitError):
        await create_worktree(repo, agent_id="a", revision="no-such-rev")


@pytest.mark.anyio
async def test_remove_survives_cancellation(repo: Path) -> None:
    wt = await create_worktree(repo, agent_id="a")
    with CancelScope() as scope:
        scope.cancel()
        await remove_worktree(repo, wt)
    assert not await AsyncPath(wt.path).exists()


@pytest.mark.anyio
async def test_remove_with_drop_branch_deletes_the_branch_and_its_reflog_not_others(repo: Path) -> None:
    kept = await create_worktree(repo, agent_id="a", kind="compaction")
    dropped = await create_worktree(repo, agent_id="a", kind="compaction")
    sha = await anyio.to_thread.run_sync(commit_file, dropped.path, "notes/a.md", note("a", "x"), "add a")
    await remove_worktree(repo, dropped, drop_branch=True)
    refs = await anyio.to_thread.run_sync(git, repo, "for-each-ref", "--format=%(refname)")
    assert f"refs/heads/{dropped.branch}" not in refs.split()
    assert f"refs/heads/{kept.branch}" in refs.split()
    assert not await AsyncPath(repo / ".git" / "logs" / "refs" / "heads" / dropped.branch).exists()
    assert (await anyio.to_thread.run_sync(git, repo, "cat-file", "-t", sha)).strip() == "commit"  # only the ref goes
    listed = await anyio.to_thread.run_sync(git, repo, "worktree", "list", "--porcelain")
    assert str(dropped.path) not in listed and str(kept.path) in listed
    await remove_worktree(repo, kept, drop_branch=True)
    assert (await anyio.to_thread.run_sync(git, repo, "for-each-ref", "refs/heads/reverie/")).strip() == ""


@pytest.mark.anyio
async def test_a_removed_worktree_is_not_left_open_in_the_repository_pool(repo: Path) -> None:
    from orchestrator.memfs.git import GitRepo
    from orchestrator.memfs.repopool import REPOS

    def opened(path: Path) -> bool:
        with GitRepo(path).open() as local:
            return local is not None

    REPOS.close_all()  # a pool other tests filled to its size would push a handle out and hide one kept
    wt = await create_worktree(repo, agent_id="a", kind="compaction")
    before = len(REPOS)
    assert await anyio.to_thread.run_sync(opened, wt.path)
    assert len(REPOS) == before + 1
    await remove_worktree(repo, wt, drop_branch=True)
    assert len(REPOS) == before, "the deleted worktree's libgit2 handle is still held"
    assert await anyio.to_thread.run_sync(opened, repo)  # the main checkout's handle still works

"""D1 with real git: the agent's own git waits for the repository lock (also inside
bubblewrap), reads do not, git's index.lock contention is retried and a stale one is removed."""

from __future__ import annotations

import os
import subprocess
import threading
import time
from functools import partial
from pathlib import Path
from typing import Any

import anyio
import anyio.to_thread
import pytest

from orchestrator.base.flock import FlockWaiter
from orchestrator.memfs.git import GitRepo
from orchestrator.memfs.indexlock import clear_stale_git_locks, clear_stale_lock_files
from orchestrator.memfs.locks import LOCK_FILE_NAME, OWNER_FILE_NAME, call_if_free, merge_lock
from orchestrator.memfs.recovery import recover
from orchestrator.tools.bash import run_bash
from orchestrator.tools.context import ToolContext
from orchestrator.tools.sandbox import bwrap_problem
from tests.memfs.reflection_helpers import commit_file, git, make_repo, note
from tests.support import hold_merge_lock, holders, running_with, wait_until


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    return make_repo(tmp_path / "memory")


def _ctx(tmp_path: Path, repo: Path, sandbox: str) -> ToolContext:
    ws = tmp_path / "ws"
    ws.mkdir(exist_ok=True)
    return ToolContext(
        workspace=ws, memory_dir=repo, agent_id="a", agent_name="A", conversation_id="c", sandbox=sandbox
    )


async def _head(repo: Path) -> str:
    return (await anyio.to_thread.run_sync(lambda: git(repo, "rev-parse", "HEAD"))).strip()


def _waiting_on(lock: Path) -> bool:
    """Whether a git wrapper (the agent's ``git add``, first of its writes) has the lock file open:
    it is then in its wait for the lock (it opens the file only to take it), also inside
    bubblewrap's namespaces."""
    wrappers = set(running_with("reverie/bin/git"))
    return any(pid in wrappers for pid, _ in holders(lock))


def _aged(path: Path, seconds: float) -> None:
    path.write_text("", encoding="utf-8")
    then = time.time() - seconds
    os.utime(path, (then, then))


@pytest.mark.anyio
@pytest.mark.parametrize("sandbox", ["off", "bwrap"])
async def test_agent_git_commit_waits_for_the_repository_lock(tmp_path: Path, repo: Path, sandbox: str) -> None:
    if sandbox == "bwrap":
        problem = await anyio.to_thread.run_sync(bwrap_problem)
        assert problem is None, f"this test needs bubblewrap (make test installs it): {problem}"
    ctx = _ctx(tmp_path, repo, sandbox)
    before = await _head(repo)
    command = (
        'cd "$MEMORY_DIR" && printf -- "---\\nname: x\\ndescription: d\\n---\\nbody\\n" > notes/x.md '
        "&& git add notes/x.md && git commit -q -m 'agent commit' && command -v git"
    )
    results: list[str] = []

    async def agent() -> None:
        result = await run_bash(command, ctx)
        assert result.ok, result.output
        results.append(result.output)

    async with anyio.create_task_group() as tg:
        async with hold_merge_lock(repo):
            tg.start_soon(agent)
            await anyio.to_thread.run_sync(
                partial(wait_until, partial(_waiting_on, repo / ".git" / LOCK_FILE_NAME), timeout=60,
                        what="the agent's git waiting on the repository lock")
            )  # fmt: skip
            # A read goes straight through while the lock is held ...
            status = await run_bash('git -C "$MEMORY_DIR" status --porcelain', ctx)
            assert status.ok and "notes/x.md" in status.output
            # ... the commit waits for the merge that holds it.
            assert await _head(repo) == before and not results
    # Released: the agent's commit went through, by the wrapper first on PATH.
    assert results and "reverie/bin/git" in results[0]
    assert (await anyio.to_thread.run_sync(lambda: git(repo, "log", "-1", "--format=%s"))).strip() == "agent commit"


@pytest.mark.anyio
async def test_index_lock_held_by_an_outside_process_is_retried(repo: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from orchestrator.memfs import gitprocess

    lock = repo / ".git" / "index.lock"
    held = await anyio.to_thread.run_sync(lambda: lock.open("w", encoding="utf-8"))
    await anyio.to_thread.run_sync(lambda: (repo / "notes" / "y.md").write_text(note("y", "x"), encoding="utf-8"))
    refused = threading.Event()
    real_run = gitprocess.run

    def watched_run(*args: Any, **kwargs: Any) -> Any:
        """The real git (in a worker thread), telling the test when an attempt met the lock."""
        result = real_run(*args, **kwargs)
        if not result.ok and "index.lock" in result.stderr:
            refused.set()
        return result

    monkeypatch.setattr(gitprocess, "run", watched_run)

    async def outside_git_finishes() -> None:
        """As git ends: the lock goes (git renames it over the index) while still open, then the file
        is closed; closed first, it would be a stale lock that reverie may remove itself."""
        await anyio.to_thread.run_sync(refused.wait)
        await anyio.Path(lock).unlink()
        held.close()

    async with anyio.create_task_group() as tg:
        tg.start_soon(outside_git_finishes)
        added = await GitRepo(repo).arun("add", "notes/y.md", harness=True, retry=True)
    assert added.ok
    assert "notes/y.md" in await anyio.to_thread.run_sync(lambda: git(repo, "diff", "--cached", "--name-only"))


def test_lock_files_nothing_holds_are_removed_whatever_their_age(repo: Path) -> None:
    """A2: staleness is whether a process holds the file, never its age or a pid."""
    old, fresh, held = (repo / ".git" / name for name in ("index.lock", "next-index-9.lock", "held.lock"))
    _aged(old, 3600)
    _aged(fresh, 0)
    _aged(held, 3600)
    notices: list[str] = []
    with held.open("rb"):
        removed = clear_stale_lock_files([old, fresh, held], roots=(repo,), notify=notices.append)
    assert removed == [old, fresh]
    assert not old.exists() and not fresh.exists() and held.exists()
    assert len(notices) == 2 and str(old) in notices[0] and "stale" in notices[0]


def test_a_git_working_in_the_repository_keeps_every_lock(repo: Path) -> None:
    """git closes a ref's lock file before renaming it into place: a live git in the repository
    (its working directory there) may still own a lock file nobody has open."""
    lock = repo / ".git" / "refs" / "heads" / "main.lock"
    lock.write_text("", encoding="utf-8")
    with subprocess.Popen(["git", "cat-file", "--batch"], cwd=repo, stdin=subprocess.PIPE, stdout=subprocess.PIPE) as live:
        try:
            assert clear_stale_lock_files([lock], roots=(repo,), notify=lambda _: None) == []
        finally:
            live.communicate(b"")
    assert clear_stale_lock_files([lock], roots=(repo,), notify=lambda _: None) == [lock]


def test_a_git_working_in_a_linked_worktree_keeps_its_index_lock(repo: Path, tmp_path: Path) -> None:
    """O9 (``--faults enospc``): ``commit -a`` in a linked worktree closes its ``index.lock``
    (under the common directory) before it commits and renames it; recovery run meanwhile for
    another reason took it for stale, and the commit was made but reported failed (its retry:
    "nothing to commit"). A git working in that worktree keeps its locks; it does not keep the
    main checkout's ``index.lock``, which only a git in the main checkout can hold."""
    checkout = tmp_path / "linked"
    git(repo, "worktree", "add", "-q", "-b", "side", str(checkout))
    lock = repo / ".git" / "worktrees" / "linked" / "index.lock"
    main_lock = repo / ".git" / "index.lock"
    lock.write_text("", encoding="utf-8")
    main_lock.write_text("", encoding="utf-8")
    with subprocess.Popen(["git", "cat-file", "--batch"], cwd=checkout, stdin=subprocess.PIPE, stdout=subprocess.PIPE) as live:
        try:
            assert clear_stale_git_locks(repo / ".git", repo) == [main_lock]
        finally:
            live.communicate(b"")
    assert clear_stale_git_locks(repo / ".git", repo) == [lock]


@pytest.mark.anyio
async def test_recovery_removes_a_stale_index_lock_and_redundant_pins(repo: Path) -> None:
    lock = repo / ".git" / "index.lock"
    branch = "reverie/reflection/20260101T000000Z-0000000a"

    def setup() -> str:
        git(repo, "branch", branch)
        git(repo, "checkout", "-q", branch)
        sha = commit_file(repo, "notes/r.md", note("r", "x"), "r")
        git(repo, "checkout", "-q", "main")
        git(repo, "update-ref", "refs/reverie/pre-rebase/20260101T000000Z-0000000a", sha)
        lock.write_text("", encoding="utf-8")
        return sha

    sha = await anyio.to_thread.run_sync(setup)
    report = await recover(repo)
    assert report.stale_index_locks == (lock,)
    assert not await anyio.Path(lock).exists()
    assert (await anyio.to_thread.run_sync(lambda: git(repo, "for-each-ref", "refs/reverie/"))) == ""
    assert (await anyio.to_thread.run_sync(lambda: git(repo, "rev-parse", branch))).strip() == sha
    assert [b.branch for b in report.pending] == [branch]


@pytest.mark.anyio
async def test_call_if_free_runs_under_the_lock_and_never_while_another_holds_it(repo: Path) -> None:
    common = repo / ".git"

    def probe() -> bool:
        other = FlockWaiter(common / LOCK_FILE_NAME)
        got = other.acquire(False)
        other.abandon()
        return got

    assert await call_if_free(repo, probe) == (True, False)
    async with merge_lock(repo, wait=False):
        pass
    calls: list[int] = []
    async with hold_merge_lock(repo):
        assert await call_if_free(repo, lambda: calls.append(1)) == (False, None)
    outside = FlockWaiter(common / LOCK_FILE_NAME)
    assert await anyio.to_thread.run_sync(outside.acquire, False)
    try:
        assert await call_if_free(repo, lambda: calls.append(2)) == (False, None)
    finally:
        outside.abandon()
    assert calls == []
    assert not (common / OWNER_FILE_NAME).exists()

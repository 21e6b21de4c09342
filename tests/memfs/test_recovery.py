from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import anyio
import anyio.to_thread
import pytest

from orchestrator.memfs.merge import FAULT_STEPS, merge_branch
from orchestrator.memfs.recovery import RecoveryReport, nothing_to_recover, recover
from orchestrator.memfs.validator import audit_head
from orchestrator.memfs.worktrees import create_worktree, list_reflections
from tests.memfs.reflection_helpers import commit_file, git, make_repo, note, reachable

_CHILD = """
import sys
from pathlib import Path
import anyio
from orchestrator.memfs.merge import merge_back
repo, worktree, branch = Path(sys.argv[1]), Path(sys.argv[2]), sys.argv[3]
print(anyio.run(merge_back, repo, worktree, branch).status)
"""


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    return make_repo(tmp_path / "memory")


async def _git(cwd: Path, *args: str) -> str:
    return await anyio.to_thread.run_sync(lambda: git(cwd, *args))


def _run_child(repo: Path, worktree: Path, branch: str, fault: str) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ, REVERIE_FAULT=fault)
    return subprocess.run(
        [sys.executable, "-c", _CHILD, str(repo), str(worktree), branch],
        env=env,
        capture_output=True,
        text=True,
        check=False,
        timeout=60,
        cwd=Path(__file__).resolve().parents[2],
    )


def _patch_ids(repo: Path, *revs: str) -> set[str]:
    log = subprocess.run(["git", "log", "-p", "--format=commit %H", *revs], cwd=repo, capture_output=True, check=True)
    ids = subprocess.run(["git", "patch-id", "--stable"], cwd=repo, input=log.stdout, capture_output=True, check=True)
    return {line.split()[0] for line in ids.stdout.decode().splitlines()}


async def _assert_valid_and_everything_reachable(repo: Path, shas: list[str], *, rebased_ok: bool = False) -> None:
    await _git(repo, "fsck", "--no-dangling")
    assert (await anyio.to_thread.run_sync(audit_head, repo)).ok
    assert (await _git(repo, "status", "--porcelain")) == ""
    in_head = await anyio.to_thread.run_sync(_patch_ids, repo, "HEAD")
    for sha in shas:
        if await anyio.to_thread.run_sync(reachable, repo, sha):
            continue
        # A completed merge replaced the commit by its rebased copy in HEAD (same patch).
        assert rebased_ok, f"{sha} is unreachable"
        assert (await anyio.to_thread.run_sync(_patch_ids, repo, "-1", sha)) <= in_head, sha


@pytest.mark.anyio
@pytest.mark.parametrize("step", FAULT_STEPS)
async def test_kill_9_during_merge_then_recovery(repo: Path, step: str) -> None:
    wt = await create_worktree(repo, agent_id="a")
    recorded = [
        await anyio.to_thread.run_sync(commit_file, wt.path, "notes/r.md", note("r", f"v{i}"), f"r{i}")
        for i in range(3)
    ]
    recorded.append(await anyio.to_thread.run_sync(commit_file, repo, "notes/m.md", note("m", "x"), "main"))

    child = await anyio.to_thread.run_sync(_run_child, repo, wt.path, wt.branch, step)
    assert child.returncode == -signal.SIGKILL, child.stderr

    report = await recover(repo)
    await _assert_valid_and_everything_reachable(repo, recorded, rebased_ok=step == "after-ff")
    assert wt.path in report.removed_worktrees
    assert not await anyio.Path(wt.path).exists()
    if step == "after-ff":
        assert report.pending == ()
        assert wt.branch in report.deleted_branches
        log = await _git(repo, "log", "--format=%s")
        assert log.split()[:4] == ["r2", "r1", "r0", "main"]
    else:
        assert [b.branch for b in report.pending] == [wt.branch]
        outcome = await merge_branch(repo, wt.id)
        assert outcome.status == "merged" and len(outcome.commits) == 3
        assert (await _git(repo, "for-each-ref", "refs/reverie/", "refs/heads/reverie/")) == ""
        assert (await _git(repo, "log", "--format=%s")).split()[:4] == ["r2", "r1", "r0", "main"]


@pytest.mark.anyio
async def test_half_done_rebase_is_aborted_and_branch_restored(repo: Path) -> None:
    wt = await create_worktree(repo, agent_id="a")
    tip = await anyio.to_thread.run_sync(commit_file, wt.path, "notes/hot.md", note("hot", "mine"), "mine")
    main = await anyio.to_thread.run_sync(commit_file, repo, "notes/hot.md", note("hot", "theirs"), "theirs")
    stopped = await anyio.to_thread.run_sync(
        lambda: subprocess.run(["git", "rebase", main], cwd=wt.path, capture_output=True, check=False)
    )
    assert stopped.returncode != 0
    report = await recover(repo)
    assert report.aborted_rebases == (wt.path,)
    (pending,) = report.pending
    assert (pending.branch, pending.tip) == (wt.branch, tip)
    await _assert_valid_and_everything_reachable(repo, [tip, main])


@pytest.mark.anyio
async def test_recovery_spares_active_runs_and_deletes_merged_branches(repo: Path) -> None:
    running = await create_worktree(repo, agent_id="a")
    merged = await create_worktree(repo, agent_id="a")
    report = await recover(repo, active={running.id})
    assert await anyio.Path(running.path).exists()
    assert merged.branch in report.deleted_branches
    assert [b.branch for b in await list_reflections(repo)] == [running.branch]
    assert report.pending == ()


@pytest.mark.anyio
async def test_stale_owner_record_is_released(repo: Path) -> None:
    from orchestrator.memfs.locks import OWNER_FILE_NAME

    dead = await anyio.to_thread.run_sync(
        lambda: subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    )
    owner = repo / ".git" / OWNER_FILE_NAME
    await anyio.Path(owner).write_text(f'{{"pid": {dead.stdout.strip()}, "started": 0, "token": "x"}}')
    report = await recover(repo)
    assert report.stale_lock_released
    assert not await anyio.Path(owner).exists()


def _empty(report: RecoveryReport) -> bool:
    return report == RecoveryReport(False, (), (), (), (), (), ())


@pytest.mark.anyio
async def test_nothing_to_recover_only_when_recovery_would_do_nothing(repo: Path) -> None:
    """The cheap look that lets a new agent skip recovery says "nothing" only where recovery finds
    nothing, and notices each thing recovery acts on."""
    from orchestrator.memfs.locks import OWNER_FILE_NAME
    from orchestrator.memfs.merge import PRE_REBASE_REF_PREFIX

    async def nothing() -> bool:
        return await anyio.to_thread.run_sync(nothing_to_recover, repo)

    assert await nothing()
    assert _empty(await recover(repo))
    wt = await create_worktree(repo, agent_id="a")
    assert not await nothing()
    await anyio.to_thread.run_sync(commit_file, wt.path, "notes/kept.md", note("kept", "mine"), "mine")
    await recover(repo)  # removes the worktree; the unmerged branch stays, pending
    assert not await nothing()
    await _git(repo, "branch", "-D", wt.branch)
    assert await nothing()
    await _git(repo, "update-ref", f"{PRE_REBASE_REF_PREFIX}{wt.id}", "HEAD")
    assert not await nothing()
    await recover(repo)  # a pin whose commits are in HEAD is deleted
    assert await _git(repo, "for-each-ref", PRE_REBASE_REF_PREFIX) == ""
    assert await nothing()
    for name in (OWNER_FILE_NAME, "index.lock"):
        await anyio.Path(repo / ".git" / name).write_text('{"pid": 1, "started": 0, "token": "x"}' if name == OWNER_FILE_NAME else "")
        assert not await nothing()
        await anyio.Path(repo / ".git" / name).unlink()
    assert await nothing()
    assert not await anyio.to_thread.run_sync(nothing_to_recover, repo / "notes")

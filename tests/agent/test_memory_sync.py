from __future__ import annotations

import subprocess
from pathlib import Path

import anyio
import pytest

from orchestrator.agent import memory_sync
from orchestrator.agent.memory_sync import after_turn, check_memory, is_transient_git_error, sync_reminder_for
from orchestrator.memfs.lockowner import LockHolder
from orchestrator.memfs.repo import init_memory_repo
from tests.support import hold_merge_lock, lock_held_elsewhere


def _git(repo: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["git", *args], cwd=repo, check=True, capture_output=True, text=True)


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    path = tmp_path / "memory"
    init_memory_repo(path)
    return path


def test_clean_local_repo_is_skipped_without_reminder(repo: Path) -> None:
    result = check_memory(repo)
    assert (result.status, result.summary) == ("skipped", "Local backend MemFS has no Letta remote to push.")
    assert sync_reminder_for(result) is None


def test_dirty_repo_gives_commit_needed_text(repo: Path) -> None:
    (repo / "persona.md").write_text("---\nname: persona\ndescription: d\n---\nchanged\n")
    (repo / "scratch.txt").write_text("x")
    result = check_memory(repo)
    assert result.status == "dirty"
    assert result.summary == "2 uncommitted memory change(s)."
    assert sync_reminder_for(result) == (
        "<system-reminder>\n"
        "MEMORY COMMIT NEEDED: The memory repository has uncommitted changes.\n\n"
        f"Memory directory: {repo}\n"
        "Status: 2 uncommitted memory change(s).\n\n"
        "Commit these memory changes locally when appropriate, staging only the files you changed. "
        "Do not run `git push` for MemFS sync; the harness pushes clean committed memory changes "
        "automatically for remote MemFS agents after turns.\n"
        "</system-reminder>"
    )


def test_no_verify_commit_of_invalid_tree_is_caught_by_audit(repo: Path) -> None:
    (repo / "notes.md").write_text("no frontmatter here\n")
    _git(repo, "add", "notes.md")
    _git(repo, "commit", "--no-verify", "-qm", "sneak")
    result = check_memory(repo)
    assert result.status == "invalid" and result.revision is not None
    assert result.summary.startswith("Committed memory fails validation:\n")
    assert any("notes.md" in line for line in result.audit_errors)
    reminder = sync_reminder_for(result)
    assert reminder is not None
    assert reminder.startswith(f"<system-reminder>\nMEMORY INVALID: the committed memory at {result.revision[:7]} fails validation:\n  ")
    assert reminder.endswith("\nFix these files and commit the fix, staging only the files you changed.\n</system-reminder>")


def test_rebase_in_progress_is_a_conflict(repo: Path) -> None:
    _git(repo, "checkout", "-qb", "side")
    (repo / "human.md").write_text("---\nname: human\ndescription: d\n---\nside\n")
    _git(repo, "commit", "--no-verify", "-qam", "side")
    _git(repo, "checkout", "-q", "main")
    (repo / "human.md").write_text("---\nname: human\ndescription: d\n---\nmain\n")
    _git(repo, "commit", "--no-verify", "-qam", "main")
    subprocess.run(["git", "rebase", "side"], cwd=repo, capture_output=True)
    result = check_memory(repo)
    # a rebase reverie did not start goes (memfs.operations); its unmerged files are still a conflict
    assert result.status == "conflict"
    assert result.summary == "conflicted file(s): human.md"
    assert not (repo / ".git" / "rebase-merge").exists()
    assert any("did not start" in line for line in result.warnings), result.warnings
    reminder = sync_reminder_for(result)
    assert reminder is not None and reminder.startswith("<system-reminder>\nMEMORY GIT CONFLICT")


def test_a_planted_rebase_folder_is_removed_not_reported_as_a_conflict(repo: Path, tmp_path: Path) -> None:
    """A rebase-in-progress folder a command wrote itself: every check would report a conflict and
    advise finishing it, which runs its todo. It is removed with a warning; nothing of it runs."""
    (repo / "human.md").write_text("---\nname: human\ndescription: d\n---\nthe agent's\n")
    _git(repo, "commit", "--no-verify", "-qam", "the agent's commit")
    first = _git(repo, "rev-list", "--max-parents=0", "HEAD").stdout.strip()
    head = _git(repo, "rev-parse", "HEAD").stdout.strip()
    marker = tmp_path / "pwned"
    state = repo / ".git" / "rebase-merge"
    state.mkdir()
    for name, text in (("git-rebase-todo", f"exec touch {marker}\n"), ("head-name", "refs/heads/main\n"),
                       ("orig-head", first + "\n"), ("onto", first + "\n"), ("interactive", "")):
        (state / name).write_text(text)
    result = check_memory(repo)
    assert result.status == "skipped" and sync_reminder_for(result) is None
    assert [line for line in result.warnings if "did not start" in line and ".git/rebase-merge" in line]
    assert not state.exists() and not marker.exists()
    assert _git(repo, "rev-parse", "main").stdout.strip() == head


def test_a_pull_that_stops_on_a_conflict_is_reverie_s_own_and_stays(repo: Path, tmp_path: Path) -> None:
    remote = tmp_path / "remote.git"
    subprocess.run(["git", "init", "-q", "--bare", "-b", "main", str(remote)], check=True)
    _git(repo, "remote", "add", "origin", str(remote))
    _git(repo, "push", "-qu", "origin", "main")
    other = tmp_path / "other"
    subprocess.run(["git", "clone", "-q", str(remote), str(other)], check=True)
    (other / "human.md").write_text("---\nname: human\ndescription: d\n---\nremote\n")
    _git(other, "commit", "--no-verify", "-qam", "remote")
    _git(other, "push", "-q")
    (repo / "human.md").write_text("---\nname: human\ndescription: d\n---\nlocal\n")
    _git(repo, "commit", "--no-verify", "-qam", "local")
    result = check_memory(repo)
    assert (result.status, result.summary) == ("conflict", "rebase in progress; conflicted file(s): human.md")
    again = check_memory(repo)
    assert again.status == "conflict" and again.summary == result.summary and not again.warnings


def test_remote_push_and_rebase_on_non_fast_forward(repo: Path, tmp_path: Path) -> None:
    remote = tmp_path / "remote.git"
    subprocess.run(["git", "init", "-q", "--bare", "-b", "main", str(remote)], check=True)
    _git(repo, "remote", "add", "origin", str(remote))
    _git(repo, "push", "-qu", "origin", "main")
    (repo / "human.md").write_text("---\nname: human\ndescription: d\n---\nlocal\n")
    _git(repo, "commit", "--no-verify", "-qam", "local")
    result = check_memory(repo)
    assert (result.status, result.summary) == ("pushed", "Pushed 1 pending memory commit(s).")

    other = tmp_path / "other"
    subprocess.run(["git", "clone", "-q", str(remote), str(other)], check=True)
    (other / "persona.md").write_text("---\nname: persona\ndescription: d\n---\nremote\n")
    _git(other, "commit", "--no-verify", "-qam", "remote")
    _git(other, "push", "-q")
    (repo / "human.md").write_text("---\nname: human\ndescription: d\n---\nlocal two\n")
    _git(repo, "commit", "--no-verify", "-qam", "local two")
    result = check_memory(repo)
    assert (result.status, result.summary) == ("pushed", "Rebased and pushed 1 pending memory commit(s).")
    log = _git(repo, "log", "--format=%s").stdout.split("\n")
    assert log[:3] == ["local two", "remote", "local"]


@pytest.mark.anyio
async def test_after_turn_skips_while_the_merge_lock_is_held(repo: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(memory_sync, "SYNC_LOCK_WAIT_SECONDS", 0.3)  # the bound, not the behaviour
    async with hold_merge_lock(repo):
        assert await after_turn(repo) is None
    result = await after_turn(repo)
    assert result is not None and result.status == "skipped"


@pytest.mark.anyio
@pytest.mark.parametrize("source", ["reflection merge", None])
async def test_after_turn_says_when_it_queues_behind_another_processs_lock(
    repo: Path, monkeypatch: pytest.MonkeyPatch, source: str | None
) -> None:
    """V5: the sync waits behind another process's hold and says so once, before waiting; it goes
    on as soon as the lock is given back (the test waits on the events, not the clock). V7: it is
    told the holder the lock's owner record names (pid and what the hold is for), nothing when a
    bare ``flock`` holds it. Waiting behind a task of its own process is not "another process"."""
    queued = anyio.Event()
    calls: list[LockHolder | None] = []
    results: list[object] = []

    async def on_wait(holder: LockHolder | None) -> None:
        calls.append(holder)
        queued.set()

    async def sync() -> None:
        results.append(await after_turn(repo, on_wait=on_wait))

    async with anyio.create_task_group() as tg:
        async with lock_held_elsewhere(repo, source) as pid:
            tg.start_soon(sync)
            await queued.wait()
            assert results == [], "still waiting while the other process holds the lock"
    assert calls == [LockHolder(pid, source) if source else None]
    assert isinstance(results[0], memory_sync.SyncResult) and results[0].status == "skipped"

    monkeypatch.setattr(memory_sync, "SYNC_LOCK_WAIT_SECONDS", 0.3)  # the bound, not the behaviour
    async with hold_merge_lock(repo):
        assert await after_turn(repo, on_wait=on_wait) is None
    assert len(calls) == 1, "a hold of this process's own is waited for without the line"


def test_only_52x_and_rpc_network_failures_are_transient() -> None:
    assert is_transient_git_error("error: RPC failed; HTTP 522 curl 22 The requested URL returned error: 522")
    assert is_transient_git_error("fatal: unable to access 'x': The requested URL returned error: 524")
    assert is_transient_git_error("error: RPC failed; curl 56 Recv failure: Connection reset by peer")
    assert not is_transient_git_error("fatal: the remote end hung up unexpectedly")
    assert not is_transient_git_error("fatal: unable to access 'x': The requested URL returned error: 503")
    assert not is_transient_git_error("remote: Permission denied; fatal: Authentication failed")


def test_rebased_tip_is_audited_before_the_second_push(repo: Path, tmp_path: Path) -> None:
    remote = tmp_path / "remote.git"
    subprocess.run(["git", "init", "-q", "--bare", "-b", "main", str(remote)], check=True)
    _git(repo, "remote", "add", "origin", str(remote))
    _git(repo, "push", "-qu", "origin", "main")
    other = tmp_path / "other"
    subprocess.run(["git", "clone", "-q", str(remote), str(other)], check=True)
    (other / "notes.md").write_text("no frontmatter here\n")
    _git(other, "add", "notes.md")
    _git(other, "commit", "--no-verify", "-qm", "remote sneaks an invalid file")
    _git(other, "push", "-q")
    (repo / "human.md").write_text("---\nname: human\ndescription: d\n---\nlocal\n")
    _git(repo, "commit", "--no-verify", "-qam", "local")
    result = check_memory(repo)
    assert result.status == "invalid" and result.summary.startswith("Committed memory fails validation:\n")
    assert result.revision == _git(repo, "rev-parse", "HEAD").stdout.strip()
    assert any("notes.md" in line for line in result.audit_errors)
    remote_head = subprocess.run(["git", "-C", str(remote), "rev-parse", "main"], capture_output=True, text=True)
    assert remote_head.stdout.strip() == _git(other, "rev-parse", "HEAD").stdout.strip(), "nothing was pushed"


@pytest.mark.anyio
async def test_after_turn_asks_again_when_the_repository_went_away(repo: Path) -> None:
    """The lock's directory is remembered per process; a repository removed since is not an error
    but the same "not initialized" answer a first look gives."""
    import shutil

    import anyio.to_thread

    first = await after_turn(repo)
    assert first is not None and first.status == "skipped" and first.revision is not None
    await anyio.to_thread.run_sync(shutil.rmtree, repo / ".git")
    gone = await after_turn(repo)
    assert gone is not None and (gone.status, gone.summary) == ("skipped", "Memory repo is not initialized.")
    await anyio.to_thread.run_sync(shutil.rmtree, repo)
    await anyio.to_thread.run_sync(init_memory_repo, repo)
    again = await after_turn(repo)
    assert again is not None and again.revision is not None

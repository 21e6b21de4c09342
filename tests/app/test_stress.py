"""The stress engine: accounting, the verdict, limit pressure and injected faults, on real git."""

from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
from pathlib import Path

import anyio.to_thread
import pytest

from orchestrator.app.stress import run_stress
from orchestrator.app.stress_audit import count_lost
from orchestrator.app.stress_faults import FaultPlan
from orchestrator.app.stress_report import VERDICT_OK, StressConfig, StressReport, percentile
from orchestrator.memfs.merge import FAULT_STEPS, merge_branch
from orchestrator.memfs.validator import validate_head
from orchestrator.models.scripted import ScriptedModel
from subagents.resolver import make_resolver
from tests.memfs.reflection_helpers import git, make_repo


async def _git(cwd: Path, *args: str) -> str:
    return await anyio.to_thread.run_sync(lambda: git(cwd, *args))


def test_percentile_nearest_rank() -> None:
    assert percentile([], 50) == 0.0
    assert percentile([5.0, 1.0, 3.0], 50) == 3.0
    assert percentile(range(1, 101), 99) == 99
    assert percentile([7.0], 99) == 7.0


def test_config_rejects_bad_values() -> None:
    with pytest.raises(ValueError, match="--writers"):
        StressConfig(writers=0, commits=1)
    with pytest.raises(ValueError, match="--conflict-rate"):
        StressConfig(writers=1, commits=1, conflict_rate=1.5)


def test_verdict_names_what_is_wrong() -> None:
    fine = StressReport(3, 0, 0, 0, 1.0, 2.0, recorded=4, main_commits=1)
    assert fine.verdict == VERDICT_OK and fine.to_json()["verdict"] == VERDICT_OK
    short = StressReport(3, 0, 2, 1, 1.0, 2.0, recorded=5, main_commits=1)
    assert short.verdict.startswith("FAIL: 2 commit(s) lost; 1 HEAD(s) fail validation; accounting does not add up")
    assert "recorded 5 != merged 3" in short.verdict
    unmerged = StressReport(1, 0, 0, 0, 1.0, 2.0, recorded=4, main_commits=1, unmerged_branches=(("b", 2),))
    assert unmerged.verdict == VERDICT_OK and unmerged.to_json()["unmerged"] == 2


@pytest.mark.anyio
async def test_four_writers_ten_commits_lose_nothing(tmp_path: Path) -> None:
    ticks: list[tuple[int, int]] = []
    config = StressConfig(writers=4, commits=10, conflict_rate=0.3, seed=7, merge_policy="keep")
    report = await run_stress(config, workdir=tmp_path / "run", progress=lambda d, t: ticks.append((d, t)))
    assert report.verdict == VERDICT_OK
    assert report.merged + report.kept + report.pending == 40 and report.pending == 0
    assert report.recorded >= 40
    assert report.merges >= 8
    assert 0 < report.merge_p50_ms <= report.merge_p99_ms
    assert ticks[-1] == (40, 40)
    repo = tmp_path / "run" / "memory"
    assert await _git(repo, "status", "--porcelain") == ""
    assert (await _git(repo, "worktree", "list", "--porcelain")).count("worktree ") == 1
    kept_branches = (await _git(repo, "for-each-ref", "--format=%(refname)", "refs/heads/reverie/")).split()
    assert bool(kept_branches) == (report.kept > 0)
    assert sorted(kept_branches) == sorted(f"refs/heads/{b}" for b in report.kept_branches)
    assert (await _git(repo, "for-each-ref", "refs/reverie/")) == ""
    for branch in report.kept_branches:
        # Kept means conflict: the branch really does not merge into HEAD.
        probe = await anyio.to_thread.run_sync(
            lambda b=branch: subprocess.run(["git", "merge-tree", "--write-tree", "HEAD", b], cwd=repo, capture_output=True)
        )
        assert probe.returncode == 1, branch


@pytest.mark.anyio
async def test_no_conflicts_merges_everything(tmp_path: Path) -> None:
    config = StressConfig(writers=3, commits=5, conflict_rate=0.0, seed=1)
    report = await run_stress(config, workdir=tmp_path / "r")
    assert (report.lost, report.invalid, report.verdict) == (0, 0, VERDICT_OK)
    assert (report.merged, report.kept, report.pending, report.kept_branches) == (15, 0, 0, ())


@pytest.mark.slow
@pytest.mark.anyio
@pytest.mark.parametrize("anyio_backend", ["trio"])
async def test_sixteen_writers_twenty_five_commits_lose_nothing() -> None:
    """Load, not speed (that is `reverie stress`'s own figure): every commit is accounted for."""
    report = await run_stress(StressConfig(writers=16, commits=25, conflict_rate=0.1, seed=3, merge_policy="keep"))
    assert report.verdict == VERDICT_OK
    assert report.merged + report.kept == 400 and report.pending == 0
    assert report.workdir is None


@pytest.mark.anyio
@pytest.mark.parametrize("anyio_backend", ["trio"])
@pytest.mark.parametrize("policy", ["keep", "resolve"])
async def test_limit_pressure_keeps_breaking_combinations_and_no_head_is_invalid(tmp_path: Path, policy: str) -> None:
    """With either policy a combination over the limits is kept, never merged (the resolver
    reconciles conflicts; it does not choose what memory to drop)."""
    config = StressConfig(writers=6, commits=10, conflict_rate=0.0, seed=1, merge_policy=policy, limit_pressure=True)
    resolver = make_resolver(ScriptedModel(), agent_id="stress", agent_name="stress")
    report = await run_stress(config, workdir=tmp_path / "p", resolver=resolver)
    assert report.verdict == VERDICT_OK
    assert report.invalid == 0 and report.invalid_combined > 0
    repo = tmp_path / "p" / "memory"
    head = await _git(repo, "rev-parse", "HEAD")
    for branch in report.kept_branches:
        # A retry keeps each again (over the limits combined, or conflicting with its writer's later
        # growth of the same file): HEAD never moves past the limits.
        assert (await merge_branch(repo, branch)).status == "kept"
    assert await _git(repo, "rev-parse", "HEAD") == head
    assert (await anyio.to_thread.run_sync(validate_head, repo)).ok


@pytest.mark.slow
@pytest.mark.anyio
@pytest.mark.parametrize("anyio_backend", ["trio"])
@pytest.mark.parametrize(("conflict_rate", "seed"), [(0.5, 2), (0.9, 3)])
async def test_faults_are_injected_recovered_and_nothing_is_lost(tmp_path: Path, conflict_rate: float, seed: int) -> None:
    """Bounded: 4 writers x 10 commits, every fault kind; each kill is a real SIGKILL of a child.
    With a hot file, full-disk merges are cut short mid-rebase and mid-resolve (O9)."""
    config = StressConfig(
        writers=4, commits=10, conflict_rate=conflict_rate, seed=seed,
        faults=("kill-merger", "kill-writer", "stale-lock", "enospc"),
    )
    resolver = make_resolver(ScriptedModel(), agent_id="stress", agent_name="stress")
    report = await run_stress(config, workdir=tmp_path / "f", resolver=resolver)
    data = report.to_json()
    assert report.verdict == VERDICT_OK, data
    assert data["faults_injected"] >= 5 and data["faults_injected"] == data["faults_recovered"]
    if data["faults_skipped"]:
        # Not root, or no tmpfs here: the full disk is skipped with its reason, the rest run.
        assert set(data["faults"]) == {"kill-merger", "kill-writer", "stale-lock"}
        assert data["faults_skipped"]["enospc"].startswith("skipped: ")
    else:
        assert set(data["faults"]) == {"kill-merger", "kill-writer", "stale-lock", "enospc"}
        assert not await anyio.to_thread.run_sync(os.path.ismount, tmp_path / "f" / "disk")
    repo = tmp_path / "f" / "memory"
    assert await _git(repo, "status", "--porcelain") == ""
    assert not (repo / ".git" / "index.lock").exists()


@pytest.mark.anyio
async def test_a_rebased_copy_is_not_lost_but_a_commit_no_branch_carries_is(tmp_path: Path) -> None:
    """Judged by git alone: a copy (same author, date, message) on a branch carries a commit; a
    commit on no branch, or an id that is not an object, is lost."""
    repo = tmp_path / "r"
    await _git(tmp_path, "init", "-q", "-b", "main", str(repo))
    (repo / "a.md").write_text("a\n")
    await _git(repo, "add", "a.md")
    await _git(repo, "commit", "-qm", "base")
    await _git(repo, "checkout", "-qb", "side")
    (repo / "b.md").write_text("b\n")
    await _git(repo, "add", "b.md")
    await _git(repo, "commit", "-qm", "side")
    rewritten = (await _git(repo, "rev-parse", "HEAD")).strip()
    await _git(repo, "checkout", "-qb", "gone")
    (repo / "c.md").write_text("c\n")
    await _git(repo, "add", "c.md")
    await _git(repo, "commit", "-qm", "gone")
    dropped = (await _git(repo, "rev-parse", "HEAD")).strip()
    await _git(repo, "checkout", "-q", "main")
    (repo / "a.md").write_text("a2\n")
    await _git(repo, "commit", "-qam", "moves on")
    await _git(repo, "cherry-pick", rewritten)
    await _git(repo, "branch", "-qD", "side", "gone")
    assert await count_lost(repo, [rewritten]) == (0, ())
    assert await count_lost(repo, [rewritten, dropped]) == (1, (dropped,))
    assert await count_lost(repo, ["0" * 40]) == (1, ("0" * 40,))


@pytest.mark.slow
@pytest.mark.anyio
@pytest.mark.parametrize("anyio_backend", ["trio"])
@pytest.mark.parametrize("step", FAULT_STEPS)
async def test_a_merger_killed_at_each_step_is_recovered_and_its_batch_merged(tmp_path: Path, step: str) -> None:
    """The main writer commits without pause, so HEAD moves and the steps of a rebase are reached
    (almost always: a merge that never rebased has no rebase step to die at, and is no fault)."""
    config = StressConfig(
        writers=2, commits=10, conflict_rate=0.0, seed=5, merge_policy="keep", main_interval=0.0,
        faults=("kill-merger",),
    )
    report = await run_stress(config, workdir=tmp_path / "k", plan=FaultPlan(config.faults, merges={(0, 1): step}))
    data = report.to_json()
    assert report.verdict == VERDICT_OK, data
    assert data["faults_injected"] == data["faults_recovered"]
    if step in {"locked", "after-ff"}:
        assert data["faults_injected"] == 1
    assert report.merged == 20 and report.unmerged == 0
    repo = tmp_path / "k" / "memory"
    assert await _git(repo, "for-each-ref", "refs/reverie/") == ""
    assert (await _git(repo, "worktree", "list", "--porcelain")).count("worktree ") == 1


@pytest.mark.anyio
@pytest.mark.parametrize("anyio_backend", ["trio"])
@pytest.mark.parametrize("step", ["stress.commit.staged", "stress.commit.made"])
async def test_a_writer_killed_mid_commit_reports_or_redoes_it(tmp_path: Path, step: str) -> None:
    """Killed before its commit, the writer makes it again; killed after, it finds it in git and
    reports it: either way each of its 10 commits is recorded once and merged."""
    config = StressConfig(writers=1, commits=10, conflict_rate=0.0, seed=5, merge_policy="keep", faults=("kill-writer",))
    report = await run_stress(config, workdir=tmp_path / "w", plan=FaultPlan(config.faults, commits={(0, 2): step}))
    data = report.to_json()
    assert report.verdict == VERDICT_OK, data
    assert (data["faults_injected"], data["faults_recovered"]) == (1, 1)
    assert report.merged == 10 and report.recorded == 10 + report.main_commits
    repo = tmp_path / "w" / "memory"
    subjects = (await _git(repo, "log", "--format=%s", "main")).splitlines()
    assert sorted(s for s in subjects if s.startswith("writer 0 ")) == sorted(f"writer 0 commit {k}" for k in range(10))


@pytest.mark.anyio
async def test_a_commit_cancelled_while_git_commits_is_still_reported(tmp_path: Path) -> None:
    """A Ctrl-C that lands mid-commit: git's commit and the summary's record of it go together (a
    commit only git knows of broke the accounting equation by one under load)."""
    from orchestrator.app.stress_repo import HOT_FILE, commit, note

    repo = await anyio.to_thread.run_sync(make_repo, tmp_path / "memory")
    reported: list[str] = []
    with anyio.CancelScope() as scope:
        scope.cancel()
        await commit(repo, HOT_FILE, note("hot", "cancelled"), "cancelled commit", reported.append)
    assert reported == [(await _git(repo, "rev-parse", "HEAD")).strip()]
    assert (await _git(repo, "log", "-1", "--format=%s")).strip() == "cancelled commit"


_DYING_GIT = """#!/bin/sh
# git that a terminal's Ctrl-C kills {when} the commit it is asked for
for arg in "$@"; do
  if [ "$arg" = commit ]; then
    {before}
    "{real}" "$@"
    kill -INT $$; kill -KILL $$
  fi
done
exec "{real}" "$@"
"""


@pytest.mark.anyio
@pytest.mark.parametrize("when", ["after", "before"])
async def test_a_commit_git_made_as_ctrl_c_killed_it_is_reported(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, when: str
) -> None:
    """Ctrl-C reaches git too: a git killed after it moved the branch failed, yet its commit is
    made and must be reported (a commit only git knew of made the equation one short of its
    ``unmerged`` count under load); one killed before committing made nothing and reports nothing."""
    from orchestrator.app.stress_repo import HOT_FILE, commit, note

    repo = await anyio.to_thread.run_sync(make_repo, tmp_path / "memory")
    before = (await _git(repo, "rev-parse", "HEAD")).strip()
    real = shutil.which("git")
    assert real is not None
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    wrapper = bin_dir / "git"
    kill_first = "kill -INT $$; kill -KILL $$" if when == "before" else ":"
    wrapper.write_text(_DYING_GIT.format(when=when, before=kill_first, real=real), encoding="utf-8")
    wrapper.chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    reported: list[str] = []
    with anyio.CancelScope() as scope:
        scope.cancel()  # the writer is cancelled by the same Ctrl-C: no retry follows the failed attempt
        await commit(repo, HOT_FILE, note("hot", "interrupted"), "interrupted", reported.append)
    monkeypatch.undo()
    head = (await _git(repo, "rev-parse", "HEAD")).strip()
    if when == "after":
        assert head != before and reported == [head]
        assert (await _git(repo, "log", "-1", "--format=%s")).strip() == "interrupted"
        assert (await _git(repo, "status", "--porcelain", "--untracked-files=no")) == ""
    else:
        assert head == before and reported == []


@pytest.mark.anyio
async def test_leaving_deletes_a_merged_branch_past_a_ref_lock_an_interrupt_left(tmp_path: Path) -> None:
    """Ctrl-C as libgit2 created a branch left its ref's ``.lock`` (no process holds it); the
    writer's way out clears it as start-up recovery would and deletes the merged branch."""
    from orchestrator.app.stress import _delete_merged

    repo = await anyio.to_thread.run_sync(make_repo, tmp_path / "memory")
    await _git(repo, "branch", "reverie/reflection/left")
    lock = repo / ".git" / "refs" / "heads" / "reverie" / "reflection" / "left.lock"
    lock.write_bytes(b"")
    await _delete_merged(repo, "reverie/reflection/left")
    assert not lock.exists()
    assert (await _git(repo, "branch", "--list", "reverie/*")).strip() == ""


_HANGING_GIT = """#!/bin/sh
# git whose commit never ends: its readiness file first, then a wait only a kill ends
for arg in "$@"; do
  if [ "$arg" = commit ]; then
    : > "{ready}"
    exec sleep {marker}
  fi
done
exec "{real}" "$@"
"""


@pytest.mark.anyio
async def test_a_cancelled_fault_child_takes_its_git_with_it(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Stopping the harness mid-commit (a cancelled ``child_commit``) kills the writer child and the
    git it was running, which would otherwise go on writing in the repository checked next."""
    from orchestrator.app.stress_faults import child_commit
    from tests.support import running_with, wait_until

    repo = await anyio.to_thread.run_sync(make_repo, tmp_path / "memory")
    real = shutil.which("git")
    assert real is not None
    marker = f"30.0{os.getpid() % 1000:03d}7"
    ready = tmp_path / "git-committing"
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "git").write_text(_HANGING_GIT.format(ready=ready, marker=marker, real=real), encoding="utf-8")
    (bin_dir / "git").chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    try:
        with anyio.fail_after(120):
            async with anyio.create_task_group() as tg:
                tg.start_soon(child_commit, repo, "notes/hang.md", "hang", "text\n", "stress.commit.made")
                await anyio.to_thread.run_sync(
                    lambda: wait_until(ready.exists, timeout=120, what="the child's git commit running")
                )
                tg.cancel_scope.cancel()
        assert running_with(marker) == [], "the child's git outlived the cancelled call"
    finally:
        for pid in running_with(marker):
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, 9)

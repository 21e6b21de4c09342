"""A subagent's worktree put back on its branch as committed, before merge-back builds on it
(TURN-5.15, O9): a rebase an earlier merge left in progress is aborted (or, when git cannot abort
it, dropped and the branch checked out again), and uncommitted edits are discarded (never
committed). Nobody builds on a half-done rebase; the branch ref itself is never moved here.
"""

from __future__ import annotations

from pathlib import Path

from orchestrator.memfs import operations
from orchestrator.memfs.errors import GitError
from orchestrator.memfs.git import GitRepo
from orchestrator.memfs.localrepo import LocalRepo

__all__ = ["abort_rebase", "clean_worktree"]


def _state(repo: LocalRepo) -> tuple[str | None, frozenset[str]]:
    """``(HEAD or None when unborn, paths with uncommitted changes)``, untracked folders collapsed."""
    return repo.head(), frozenset(path for _, path in repo.status("normal"))


async def _rebasing(worktree: Path) -> bool:
    return await GitRepo(worktree).ask(lambda repo: repo.operation()) == "rebase in progress"


async def abort_rebase(worktree: Path, branch: str) -> None:
    """Abort a rebase in progress in ``worktree`` (none: nothing to do), back on ``branch`` as
    committed; :class:`GitError` when that cannot be done (git still cannot write: a full disk),
    so nobody builds on a half-done rebase.

    What a full disk leaves is not always what ``rebase --abort`` expects. An abort that failed
    part-way leaves files of the branch's commits untracked, and git then refuses to abort again
    ("untracked working tree files would be overwritten"): the worktree's uncommitted files (never
    committed, TURN-5.15) are discarded and it is tried once more. A rebase that could not
    write its own state (no ``onto``) cannot be aborted at all ("invalid onto"): it is dropped with
    ``--quit`` and ``branch`` checked out again. Either way the branch ref itself is untouched: git
    moves it only when a rebase finishes.

    A state that is not what reverie's own git left (``memfs.operations``: a command planted or
    changed it) is never handed to git, whose abort would reset the branch ``head-name`` names to
    ``orig-head``: it is dropped unread and ``branch`` checked out again."""
    git = GitRepo(worktree)
    if await operations.in_progress(worktree) and not await operations.intact(worktree):
        await operations.drop(worktree)
        await git.arun("checkout", "-q", "-f", branch, "--", harness=True)
        await git.arun("clean", "-q", "-fd", check=False, harness=True)
        return
    aborted = await git.arun("rebase", "--abort", check=False, harness=True)
    if await _rebasing(worktree):
        await git.arun("reset", "-q", "--hard", check=False, harness=True)
        await git.arun("clean", "-q", "-fd", check=False, harness=True)
        aborted = await git.arun("rebase", "--abort", check=False, harness=True)
    if await _rebasing(worktree):
        quit_ = await git.arun("rebase", "--quit", check=False, harness=True)
        if quit_.ok:
            await git.arun("checkout", "-q", "-f", branch, "--", harness=True)
            await git.arun("clean", "-q", "-fd", check=False, harness=True)
    if await _rebasing(worktree):
        said = aborted.stderr.strip() or "the rebase in progress is still there"
        raise GitError(("rebase", "--abort"), aborted.returncode or 1, said, worktree)
    await operations.record(worktree)  # nothing left in progress: the record goes


async def clean_worktree(worktree: Path, branch: str) -> str:
    """The branch as committed, in a clean worktree: its HEAD.

    Uncommitted edits are discarded (never committed, TURN-5.15 step 2). A rebase an earlier
    merge left in progress (its own abort failed: the disk was full) is aborted first, which puts
    the branch and ``HEAD`` back on the commits as made: resetting the files alone would leave
    ``HEAD`` on the rebase's detached, half-replayed copies, and a merge from there brings in only
    the commits replayed so far and leaves the sequencer armed in a worktree still in use (O9:
    the full-disk stress's commits dropped from, or folded into, the merged copies)."""
    git = GitRepo(worktree)
    if await operations.in_progress(worktree):
        await abort_rebase(worktree, branch)
    if await git.ask(lambda repo: repo.branch()) != branch:
        # Detached (a rebase dropped with --quit whose checkout of the branch failed): back on it.
        await git.arun("checkout", "-q", "-f", branch, "--", harness=True)
    tip, dirty = await git.ask(_state)
    if dirty:
        await git.arun("reset", "-q", "--hard", harness=True, retry=True)
        await git.arun("clean", "-q", "-fd", harness=True)
    if tip is None:
        raise GitError(("status",), 1, f"{worktree}: the worktree has no commits")
    return tip

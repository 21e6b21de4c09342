"""A reflection branch held for a person's review (V1): nothing of it reaches ``HEAD`` until someone
merges it (``merge_branch``, the normal merge-back) or discards it.

Holding a finished run is finalising it without the merge: its committed tip stays on its branch,
uncommitted edits in its worktree are dropped with the worktree (never committed, TURN-5.15 step 2),
and what it changes is measured against the revision it started from, so a ``HEAD`` that moved
meanwhile does not show up as the reflection undoing it. A branch with no commits of its own is
removed (it holds nothing to decide on).
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import partial
from pathlib import Path

from anyio import CancelScope

from orchestrator.base import blocking
from orchestrator.memfs.errors import GitError
from orchestrator.memfs.git import GitRepo
from orchestrator.memfs.history import line_counts, patch
from orchestrator.memfs.localrepo import LocalRepo
from orchestrator.memfs.locks import merge_lock
from orchestrator.memfs.merge import delete_merged_branch, resolve_branch
from orchestrator.memfs.worktrees import Worktree, remove_worktree

__all__ = ["HeldBranch", "branch_patch", "hold_worktree", "held_branch"]


@dataclass(frozen=True)
class HeldBranch:
    """A branch waiting for review: its commits not in ``HEAD``, and per file the lines it adds and
    removes since the revision it started from (``base``)."""

    branch: str
    tip: str
    base: str | None
    commits: tuple[str, ...]
    files: tuple[tuple[str, int, int], ...]

    @property
    def added(self) -> int:
        return sum(added for _, added, _ in self.files)

    @property
    def removed(self) -> int:
        return sum(removed for _, _, removed in self.files)

    @property
    def summary(self) -> str:
        """``2 files, +5 -1``: what the REPL and the text output say of it."""
        return f"{len(self.files)} file{'s' if len(self.files) != 1 else ''}, +{self.added} -{self.removed}"


def _measure(repo_dir: Path, branch: str, base: str | None) -> HeldBranch | None:
    def read(local: LocalRepo) -> tuple[str | None, str | None, tuple[str, ...]]:
        tip = local.ref(f"refs/heads/{branch}")
        head = local.head()
        if tip is None or head is None:
            return tip, head, ()
        return tip, local.merge_base(head, tip) if base is None else base, local.commits(head, tip)

    tip, start, commits = GitRepo(repo_dir).read(read)
    if tip is None or not commits:
        return None
    counts = line_counts(repo_dir, start, tip) if start else ()
    files = tuple((c.path, c.added or 0, c.removed or 0) for c in counts)
    return HeldBranch(branch, tip, start, commits, files)


async def hold_worktree(repo_dir: Path, worktree: Worktree) -> HeldBranch | None:
    """End a finished run for review: keep its branch, remove its worktree; None when it committed
    nothing (the branch is removed then, as merge-back removes a merged one)."""
    repo = Path(repo_dir)
    held: HeldBranch | None = None
    try:
        async with merge_lock(repo, source="reflection held for review"):
            held = await blocking.run_sync("git", partial(_measure, repo, worktree.branch, worktree.base_revision))
    finally:
        with CancelScope(shield=True):
            await remove_worktree(repo, worktree)
            if held is None:
                await delete_merged_branch(repo, worktree.branch)
    return held


async def held_branch(repo_dir: Path, name_or_id: str, base: str | None = None) -> HeldBranch | None:
    """A kept branch as it stands now (None when it is gone or in ``HEAD``); ``ReflectionBranchError``
    when no reverie branch has that name or id."""
    branch = await resolve_branch(Path(repo_dir), name_or_id)
    return await blocking.run_sync("git", partial(_measure, Path(repo_dir), branch, base))


async def branch_patch(repo_dir: Path, held: HeldBranch) -> str:
    """The branch's change as ``git diff`` prints it, from the revision it started from."""
    said = await blocking.run_sync("git", partial(patch, Path(repo_dir), held.base, held.tip))
    if said is None:
        raise GitError(("diff",), 1, f"cannot diff {held.branch} in {repo_dir}")
    return said


"""Start-up reconciliation of a memory repository (R6; TURN-5.15 "Recovery").

After a crash (``kill -9`` included) reverie's worktrees, branches and locks may be left in any
intermediate state of merge-back. :func:`recover` brings them back to a clean, valid state
without dropping a commit:

1. release a stale merge-lock owner record (the OS lock died with its process);
2. under the merge lock: remove git's lock files that no process holds (``memfs.indexlock``); abort a half-done rebase in any of reverie's own worktrees (the branch
   returns to its pre-rebase tip, which is also pinned by ``refs/reverie/pre-rebase/<id>``); a
   state reverie's git did not leave there is dropped unread instead (``memfs.operations``);
3. remove reverie's worktrees that no live run owns (``active`` names those that are running)
   and ``git worktree prune``;
4. delete ``reverie/*`` branches whose commits are all in ``HEAD``, and pre-rebase pins whose
   branch is merged or gone with its content in ``HEAD``; a pin whose commits are not in
   ``HEAD`` and whose branch no longer exists is turned back into a branch, so it is listed;
5. return the remaining branches as pending, to be re-queued (or listed by
   ``reverie reflections``).

Never run on the event loop thread's blocking calls: everything goes through worker threads.
"""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass
from functools import partial
from pathlib import Path

from orchestrator.base import blocking
from orchestrator.memfs import operations
from orchestrator.memfs.git import GitRepo
from orchestrator.memfs.indexlock import clear_stale_git_locks
from orchestrator.memfs.locks import merge_lock, release_stale_lock, worktree_admin_lock
from orchestrator.memfs.names import PRE_REBASE_REF_PREFIX
from orchestrator.memfs.tidy import nothing_to_recover
from orchestrator.memfs.worktrees import (
    BRANCH_PREFIX,
    ReflectionBranch,
    git_common_dir,
    id_from_branch,
    id_from_worktree_dir,
    list_reflections,
    prune_worktrees,
    remove_worktree,
    worktree_records,
)

__all__ = ["RecoveryReport", "nothing_to_recover", "recover"]


@dataclass(frozen=True)
class RecoveryReport:
    """What start-up recovery found and repaired, and the reflection branches it left pending."""

    stale_lock_released: bool
    aborted_rebases: tuple[Path, ...]
    removed_worktrees: tuple[Path, ...]
    deleted_branches: tuple[str, ...]
    restored_branches: tuple[str, ...]
    pending: tuple[ReflectionBranch, ...]
    stale_index_locks: tuple[Path, ...] = ()


def _rebase_in_progress(worktree: Path) -> bool:
    with GitRepo(worktree).open() as local:
        return local is not None and local.operation() == "rebase in progress"


def _is_ancestor(repo: Path, rev: str) -> bool:
    with GitRepo(repo).open() as local:
        head = None if local is None else local.head()
        return local is not None and head is not None and local.is_ancestor(rev, head)


def _pins(repo: Path) -> tuple[tuple[str, str], ...]:
    with GitRepo(repo).open() as local:
        return () if local is None else local.refs(PRE_REBASE_REF_PREFIX)


async def recover(repo_dir: Path, *, active: Collection[str] = ()) -> RecoveryReport:
    """Reconcile ``repo_dir`` (see the module docstring); ``active``: ids of running subagents."""
    repo = Path(repo_dir)
    common = await git_common_dir(repo)
    released = await blocking.run_sync("files", partial(release_stale_lock, common))
    aborted: list[Path] = []
    removed: list[Path] = []
    deleted: list[str] = []
    restored: list[str] = []
    async with merge_lock(repo, common_dir=common, source="start-up recovery"):
        # A2: git's lock files that nothing holds go at once, before any commit
        stale = tuple(await blocking.run_sync("files", partial(clear_stale_git_locks, common, repo)))
        async with worktree_admin_lock(repo, common_dir=common):
            await prune_worktrees(repo)
        for path, branch in (await worktree_records(repo))[1:]:
            wid = id_from_branch(branch) if branch is not None else id_from_worktree_dir(path)
            if wid is None or wid in active:
                continue
            if await operations.in_progress(path) and not await operations.intact(path):
                await operations.drop(path)  # not what reverie's git left: never handed to git
                aborted.append(path)
            if await blocking.run_sync("git", partial(_rebase_in_progress, path)):
                await GitRepo(path).arun("rebase", "--abort", check=False, harness=True)
                aborted.append(path)
            await remove_worktree(repo, path)
            removed.append(path)
        pins = await blocking.run_sync("git", partial(_pins, repo))
        branches = {b.branch: b for b in await list_reflections(repo, kind=None)}
        by_id = {b.id: b for b in branches.values()}
        for ref, tip in pins:
            pid = ref[len(PRE_REBASE_REF_PREFIX) :]
            if pid in active:
                continue
            owner = by_id.get(pid)
            if owner is not None and not owner.merged:
                # A pin is needed only while its commits are on no branch (a rebase in flight).
                held = await GitRepo(repo).arun("merge-base", "--is-ancestor", tip, owner.tip, check=False, harness=True)
                if held.ok:
                    await GitRepo(repo).arun("update-ref", "-d", ref, tip, check=False, harness=True)
                continue
            if owner is None and not await blocking.run_sync("git", partial(_is_ancestor, repo, tip)):
                # The branch is gone but its pinned commits are not in HEAD: list them again.
                name = f"{BRANCH_PREFIX}reflection/{pid}"
                if id_from_branch(name) is not None:
                    await GitRepo(repo).arun("update-ref", f"refs/heads/{name}", tip, "", harness=True)
                    restored.append(name)
                continue
            await GitRepo(repo).arun("update-ref", "-d", ref, tip, check=False, harness=True)
        listed = await list_reflections(repo, kind=None)
        for item in listed:
            if item.id in active:
                continue
            if item.merged:
                await GitRepo(repo).arun("update-ref", "-d", f"refs/heads/{item.branch}", item.tip, check=False, harness=True)
                deleted.append(item.branch)
        pending = tuple(b for b in listed if not b.merged and b.id not in active)
    return RecoveryReport(
        stale_lock_released=released,
        aborted_rebases=tuple(aborted),
        removed_worktrees=tuple(removed),
        deleted_branches=tuple(deleted),
        restored_branches=tuple(restored),
        pending=pending,
        stale_index_locks=stale,
    )

"""Resolving a rebase conflict inside the rebase (D3), without the repository lock.

With the ``resolve`` merge policy, a conflict met while merge-back rebases a branch is handed to
a *resolver*: any callable taking a :class:`Conflict` (the composition root wires in the resolver
subagent; the core never imports it, D9). The resolver edits the conflicting files in the
worktree and stages them (the rebase's state is read-only to its commands); the harness drives what is left
(``rebase --continue``, one round per replayed commit that conflicts), then checks the history is
linear and contains ``HEAD`` (R3: no merge commit). A step the resolver reconciled is committed by
the harness with the branch's message and ``Reverie-Source: resolver`` in its trailers (H1). Before each ``--continue`` the rebase's own
state must be what reverie's git left (``memfs.operations``): a todo list the resolver's command
changed would run its ``exec`` lines outside the sandbox. Anything short of that raises
:class:`ResolverFailed` with a one-line reason; merge-back then aborts the rebase and keeps the
branch with D3's reason text.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path

from orchestrator.base import blocking
from orchestrator.memfs import operations
from orchestrator.memfs.errors import MemfsError
from orchestrator.memfs.git import GitRepo
from orchestrator.memfs.provenance import SOURCE_KEY

__all__ = [
    "Conflict",
    "Resolver",
    "ResolverFailed",
    "check_linear",
    "conflicted_files",
    "rebase_in_progress",
    "resolve_rebase",
]

_MARKERS = ("<<<<<<< ", ">>>>>>> ")
_CHANGED = (
    "the rebase's own state (its todo list, or what git reads to go on) was changed during the resolver's turn; "
    "reverie did not continue it"
)


@dataclass(frozen=True)
class Conflict:
    """One stopped step of a rebase: ``commit`` (of ``branch``) does not apply onto ``onto``.

    In the worktree's index, stage 2 of each file is the ``HEAD`` side and stage 3 the branch's
    (``git show :2:<file>`` / ``:3:<file>``), stage 1 their common base. ``lock_held`` is the git
    common directory whose lock the caller holds, so the resolver's own git commands must not wait
    for it (the wrapper's ``REVERIE_GIT_LOCK_HELD``); None (merge-back's case: the lock is never
    held across a model call) lets them take it as any agent's git does.
    """

    worktree: Path
    branch: str
    onto: str
    commit: str
    subject: str
    files: tuple[str, ...]
    lock_held: Path | None = None


Resolver = Callable[[Conflict], Awaitable[None]]
"""Resolves the conflicted files of a :class:`Conflict` in place and stages them; raises on failure."""


class ResolverFailed(MemfsError, RuntimeError):
    """The conflict could not be reconciled; ``str()`` is the reason shown to the agent (one line)."""


def _split_z(raw: str) -> tuple[str, ...]:
    return tuple(p for p in raw.split("\0") if p)


async def rebase_in_progress(worktree: Path) -> bool:
    """Whether a rebase is stopped in ``worktree`` (False where it is no repository's top level)."""

    def rebasing() -> bool:
        with GitRepo(worktree).open() as repo:
            return repo is not None and repo.rebasing()

    return await blocking.run_sync("git", rebasing)


async def conflicted_files(worktree: Path) -> tuple[str, ...]:
    out = await GitRepo(worktree).arun("diff", "--name-only", "--diff-filter=U", "-z", check=False, harness=True)
    return tuple(dict.fromkeys(_split_z(out.stdout)))


async def _markers_left(worktree: Path, files: tuple[str, ...]) -> tuple[str, ...]:
    left = []
    for rel in files:
        staged = await GitRepo(worktree).arun("show", f":0:{rel}", check=False, harness=True)
        if staged.ok and any(line.startswith(_MARKERS) for line in staged.stdout.splitlines()):
            left.append(rel)
    return tuple(left)


async def resolve_rebase(
    worktree: Path,
    *,
    branch: str,
    onto: str,
    resolver: Resolver,
    lock_held: Path | None,
    max_rounds: int,
) -> tuple[str, ...]:
    """Drive a stopped rebase to its end through ``resolver``; returns the files it resolved."""
    resolved: list[str] = []
    rounds = 0
    for _ in range(max_rounds * 3 + 3):
        if not await rebase_in_progress(worktree):
            return tuple(dict.fromkeys(resolved))
        files = await conflicted_files(worktree)
        if files:
            rounds += 1
            if rounds > max_rounds:
                raise ResolverFailed(f"more than {max_rounds} conflicting steps")
            stopped = await GitRepo(worktree).arun("rev-parse", "-q", "--verify", "REBASE_HEAD", check=False, harness=True)
            commit = stopped.stdout.strip()
            subject = (await GitRepo(worktree).arun("log", "-1", "--format=%s", commit, check=False, harness=True)).stdout.strip()
            conflict = Conflict(worktree, branch, onto, commit, subject, files, lock_held)
            try:
                await resolver(conflict)
            except ResolverFailed:
                raise
            except Exception as exc:
                raise ResolverFailed(f"{type(exc).__name__}: {exc}".splitlines()[0]) from exc
            resolved.extend(files)
            left = await conflicted_files(worktree)
            if left:
                raise ResolverFailed(f"{', '.join(left)} still conflicted")
            marked = await _markers_left(worktree, files)
            if marked:
                raise ResolverFailed(f"conflict markers left in {', '.join(marked)}")
            if not await rebase_in_progress(worktree):
                return tuple(dict.fromkeys(resolved))
        if not await operations.intact(worktree):
            raise ResolverFailed(_CHANGED)
        if files:
            # H1: the reconciled commit keeps the branch's message and says the resolver made it
            await GitRepo(worktree).arun("-c", "trailer.ifexists=replace", "commit", "-q", "--allow-empty", "-C", "REBASE_HEAD", "--trailer", f"{SOURCE_KEY}: resolver", harness=True, retry=True)
            await operations.record(worktree)
        step = await GitRepo(worktree).arun("rebase", "--continue", check=False, harness=True, retry=True)
        await operations.record(worktree)
        if step.ok or await conflicted_files(worktree):
            continue
        nothing_staged = (await GitRepo(worktree).arun("diff", "--cached", "--quiet", "HEAD", check=False, harness=True)).ok
        if nothing_staged:
            # The resolution equals HEAD's side: keep the commit (empty) so old and new pair up.
            await GitRepo(worktree).arun("commit", "-q", "--allow-empty", "-C", "REBASE_HEAD", harness=True, retry=True)
            await operations.record(worktree)
            continue
        said = [line for line in (step.stderr or step.stdout).splitlines() if line.strip()]
        raise ResolverFailed(f"git rebase --continue failed: {said[0] if said else step.returncode}")
    raise ResolverFailed("the rebase did not finish")


async def check_linear(worktree: Path, head: str, tip: str) -> str | None:
    """``None`` when ``tip`` contains ``head`` by linear history (R3), else why not."""
    contains = await GitRepo(worktree).arun("merge-base", "--is-ancestor", head, tip, check=False, harness=True)
    if not contains.ok:
        return "the resolved branch does not contain the current memory"
    merges = await GitRepo(worktree).arun("rev-list", "--merges", f"{head}..{tip}", check=False, harness=True)
    if merges.stdout.strip():
        return "the resolved branch has a merge commit"
    return None

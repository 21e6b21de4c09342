"""Merge-back of a subagent branch into the memory checkout (DECISIONS R2-R4, M8; turn-loop 5.15).

Under the repository's merge lock: a dirty parent keeps the branch; otherwise the branch is
rebased onto the parent's current ``HEAD`` **in the worktree** (so a conflict never touches the
user's checkout), the candidate tree is audited in-process (M8), and the parent fast-forwards
with ``git merge --ff-only`` (which updates its working tree and refuses to overwrite
uncommitted changes). On conflict the rebase is aborted and the branch kept as it was. No commit
is ever dropped:

* while a rebase is in flight the pre-rebase tip is pinned by ``refs/reverie/pre-rebase/<id>``,
  deleted only once the rebased commits are in ``HEAD`` (or the rebase was aborted), so a crash at
  any point leaves every commit reachable; recovery finishes the job (R6);
* the rebase keeps commits that become empty (``--empty=keep``), so old and new commits pair up
  one to one; :attr:`MergeOutcome.rewritten` reports the pairs.

Branches are deleted only when their commits are in ``HEAD`` (or on an explicit discard).

Fault injection (DECISIONS S29): ``REVERIE_FAULT=<step>`` kills this process with ``SIGKILL`` when
merge-back reaches ``<step>``; ``REVERIE_FAULT=pause:<step>`` sleeps there instead (for
``REVERIE_FAULT_PAUSE_SECONDS``, default 3600; cancellable). Steps, in order: ``locked`` (lock
held, nothing done), ``before-rebase`` (pre-rebase ref written), ``between-rebase-and-ff``
(branch rebased, parent untouched), ``after-ff`` (parent fast-forwarded, refs not yet cleaned).
"""

from __future__ import annotations

import os
import signal
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

import anyio.to_thread
from anyio import CancelScope, sleep
from anyio import Path as AsyncPath

from orchestrator.agent.reminders import (
    MEMORY_INVALID_TEMPLATE,
    REFLECTION_KEPT_TEMPLATE,
    memory_invalid_reminder,
    reflection_kept_reminder,
)
from orchestrator.memfs.errors import MemfsError
from orchestrator.memfs.git import GitError, arun
from orchestrator.memfs.locks import merge_lock, worktree_admin_lock
from orchestrator.memfs.worktrees import (
    BRANCH_PREFIX,
    Worktree,
    id_from_branch,
    list_reflections,
    remove_worktree,
    worktrees_root,
)

__all__ = [
    "FAULT_STEPS",
    "MEMORY_INVALID_TEMPLATE",
    "PRE_REBASE_REF_PREFIX",
    "REASON_CONFLICT",
    "REASON_DIRTY",
    "REASON_FAILED",
    "REASON_INVALID",
    "REFLECTION_KEPT_TEMPLATE",
    "AuditFn",
    "MergeOutcome",
    "MergeStatus",
    "ReflectionBranchError",
    "default_audit",
    "discard_branch",
    "fault_point",
    "finalize_worktree",
    "invalid_memory_reminder_text",
    "kept_reminder_text",
    "merge_back",
    "merge_branch",
    "resolve_branch",
]

MergeStatus = Literal["merged", "kept", "no_changes"]
AuditFn = Callable[[Path, str, str | None], Awaitable[tuple[str, ...]]]
"""``(checkout, revision, accepted_base) -> error lines`` (empty when valid)."""

REASON_CONFLICT = "conflicts with newer memory changes"
REASON_DIRTY = "the memory repository had uncommitted changes"
REASON_FAILED = "the reflection failed before finishing"
REASON_INVALID = "the merged memory fails validation"
PRE_REBASE_REF_PREFIX = "refs/reverie/pre-rebase/"
FAULT_STEPS = ("locked", "before-rebase", "between-rebase-and-ff", "after-ff")
_FF_ATTEMPTS = 3
_BUSY_ATTEMPTS = 20


class ReflectionBranchError(MemfsError, ValueError):
    """The named reflection branch does not exist, or is not reverie's to discard."""


@dataclass(frozen=True)
class MergeOutcome:
    """What merge-back did. ``commits`` are the branch's commits (after the rebase when merged).

    ``status`` is ``merged``, ``kept`` (``reason`` is one of the ``REASON_*`` texts of S12) or
    ``no_changes`` (the branch adds nothing to ``HEAD``). ``files``: the conflicting files on a
    conflict, else the files the branch changes. ``new_head``: the parent's ``HEAD`` afterwards.
    """

    status: MergeStatus
    reason: str | None
    branch: str
    commits: tuple[str, ...]
    files: tuple[str, ...]
    new_head: str | None
    rewritten: tuple[tuple[str, str], ...] = ()
    errors: tuple[str, ...] = ()

    @property
    def commit_count(self) -> int:
        return len(self.commits)

    @property
    def pending_status(self) -> str | None:
        """turn-loop 5.15's status name for a kept branch (``pending_conflict`` …)."""
        return {
            REASON_CONFLICT: "pending_conflict",
            REASON_DIRTY: "pending_parent_dirty",
            REASON_INVALID: "pending_invalid",
            REASON_FAILED: "kept_failed",
        }.get(self.reason or "")


def kept_reminder_text(outcome: MergeOutcome, id: str) -> str:
    """DECISIONS S12 "MEMORY REFLECTION KEPT" for a kept outcome."""
    return reflection_kept_reminder(
        n=outcome.commit_count,
        reason=outcome.reason or REASON_FAILED,
        branch=outcome.branch,
        files=outcome.files,
        id=id,
    )


def invalid_memory_reminder_text(sha7: str, errors: Sequence[str]) -> str:
    """DECISIONS S12 "MEMORY INVALID" (M8)."""
    return memory_invalid_reminder(sha7, errors)


async def default_audit(checkout: Path, revision: str, base: str | None) -> tuple[str, ...]:
    """The MemFS validator's audit (frontmatter rules and tree constraints, S13) in a thread."""
    from orchestrator.memfs.validator import audit_head

    result = await anyio.to_thread.run_sync(lambda: audit_head(checkout, revision=revision, base=base))
    return tuple(result.errors)


async def fault_point(step: str) -> None:
    """Die (``SIGKILL``) or pause here if ``REVERIE_FAULT`` names ``step`` (S29)."""
    fault = os.environ.get("REVERIE_FAULT", "")
    if fault == step:
        os.kill(os.getpid(), signal.SIGKILL)
    if fault == f"pause:{step}":
        await sleep(float(os.environ.get("REVERIE_FAULT_PAUSE_SECONDS", "3600")))


def _parse_status_v2(raw: str) -> tuple[str | None, bool]:
    """``(HEAD oid or None when unborn, dirty)`` from ``git status --porcelain=v2 --branch -z``."""
    head: str | None = None
    dirty = False
    for field in raw.split("\0"):
        if field.startswith("# branch.oid "):
            value = field[len("# branch.oid ") :]
            head = None if value == "(initial)" else value
        elif field and not field.startswith("#"):
            dirty = True
    return head, dirty


def _split_z(raw: str) -> tuple[str, ...]:
    return tuple(p for p in raw.split("\0") if p)


async def _parent_state(repo_dir: Path) -> tuple[str, bool]:
    out = await arun(repo_dir, "status", "--porcelain=v2", "--branch", "-z", "--untracked-files=normal", harness=True)
    head, dirty = _parse_status_v2(out.stdout)
    if head is None:
        raise GitError(("status",), 1, f"{repo_dir}: the memory repository has no commits")
    return head, dirty


async def _changed_files(checkout: Path, base: str, tip: str) -> tuple[str, ...]:
    out = await arun(checkout, "diff", "--name-only", "-z", "--no-renames", f"{base}...{tip}", check=False, harness=True)
    return _split_z(out.stdout) if out.ok else ()


async def _clean_worktree(worktree: Path) -> str:
    """Discard uncommitted edits in the worktree (never committed, turn-loop 5.15 step 2); its HEAD."""
    out = await arun(worktree, "status", "--porcelain=v2", "--branch", "-z", "--untracked-files=normal", harness=True)
    tip, dirty = _parse_status_v2(out.stdout)
    if dirty:
        await arun(worktree, "reset", "-q", "--hard", harness=True)
        await arun(worktree, "clean", "-q", "-fd", harness=True)
    if tip is None:
        raise GitError(("status",), 1, f"{worktree}: the worktree has no commits")
    return tip


def _pin_ref(branch: str) -> str:
    return PRE_REBASE_REF_PREFIX + (id_from_branch(branch) or branch.replace("/", "-"))


async def _merge_locked(repo_dir: Path, worktree: Path, branch: str, audit: AuditFn) -> MergeOutcome:
    await fault_point("locked")
    tip = await _clean_worktree(worktree)
    original_tip = tip
    rewritten: tuple[tuple[str, str], ...] = ()
    pin = _pin_ref(branch)
    pinned = False
    busy = 0
    attempt = 0
    while True:
        head, dirty = await _parent_state(repo_dir)
        sides = await arun(worktree, "rev-list", "--reverse", "--left-right", f"{head}...{tip}", harness=True)
        behind = [line[1:] for line in sides.stdout.split() if line.startswith("<")]
        commits = tuple(line[1:] for line in sides.stdout.split() if line.startswith(">"))
        if not commits:
            if pinned:
                await arun(repo_dir, "update-ref", "-d", pin, check=False, harness=True)
            return MergeOutcome("no_changes", None, branch, (), (), head, rewritten)
        if dirty:
            files = await _changed_files(worktree, head, tip)
            return MergeOutcome("kept", REASON_DIRTY, branch, commits, files, head, rewritten)
        if behind:
            if not pinned:
                # Create-only: an older pin (an earlier interrupted merge) keeps its older commits.
                await arun(repo_dir, "update-ref", pin, original_tip, "", check=False, harness=True)
                pinned = True
            await fault_point("before-rebase")
            rebase = await arun(worktree, "rebase", "-q", "--empty=keep", "--no-autosquash", head, check=False, harness=True)
            if not rebase.ok:
                conflicted = await arun(worktree, "diff", "--name-only", "--diff-filter=U", "-z", check=False, harness=True)
                files = _split_z(conflicted.stdout)
                await arun(worktree, "rebase", "--abort", check=False, harness=True)
                restored = await arun(worktree, "rev-parse", "HEAD", harness=True)
                if restored.stdout.strip() == original_tip:
                    await arun(repo_dir, "update-ref", "-d", pin, original_tip, check=False, harness=True)
                old_commits = await arun(worktree, "rev-list", "--reverse", f"{head}..{restored.stdout.strip()}", harness=True)
                if not files:
                    files = await _changed_files(worktree, head, restored.stdout.strip())
                return MergeOutcome(
                    "kept",
                    REASON_CONFLICT,
                    branch,
                    tuple(old_commits.stdout.split()),
                    files,
                    head,
                    rewritten,
                    errors=tuple((rebase.stderr.strip().splitlines() or ["rebase failed"])[-1:]),
                )
            new = await arun(worktree, "rev-list", "--reverse", f"{head}..HEAD", harness=True)
            new_commits = tuple(new.stdout.split())
            if len(new_commits) == len(commits):
                rewritten = _compose(rewritten, tuple(zip(commits, new_commits, strict=True)))
            commits, tip = new_commits, new_commits[-1]
            await fault_point("between-rebase-and-ff")
        errors = await audit(worktree, tip, head)
        if errors:
            files = await _changed_files(worktree, head, tip)
            return MergeOutcome("kept", REASON_INVALID, branch, commits, files, head, rewritten, tuple(errors))
        ff = await arun(repo_dir, "merge", "--ff-only", "-q", tip, check=False, harness=True)
        if ff.ok:
            await fault_point("after-ff")
            if pinned:
                await arun(repo_dir, "update-ref", "-d", pin, check=False, harness=True)
            files = await _changed_files(worktree, head, tip)
            return MergeOutcome("merged", None, branch, commits, files, tip, rewritten)
        message = ff.stderr
        if "would be overwritten" in message or "untracked working tree files" in message:
            files = await _changed_files(worktree, head, tip)
            return MergeOutcome("kept", REASON_DIRTY, branch, commits, files, head, rewritten)
        if "Not possible to fast-forward" in message or "fast-forward" in message:
            attempt += 1
            if attempt >= _FF_ATTEMPTS:
                files = await _changed_files(worktree, head, tip)
                return MergeOutcome("kept", REASON_CONFLICT, branch, commits, files, head, rewritten)
            continue
        busy += 1
        if busy >= _BUSY_ATTEMPTS:
            raise GitError(("merge", "--ff-only"), ff.returncode, message)
        await sleep(0.02 * busy)


def _compose(
    earlier: tuple[tuple[str, str], ...], later: tuple[tuple[str, str], ...]
) -> tuple[tuple[str, str], ...]:
    """Chain two rewrite maps: original → latest."""
    step = dict(later)
    chained = tuple((old, step.get(mid, mid)) for old, mid in earlier)
    seen = {mid for _, mid in earlier}
    return chained + tuple(pair for pair in later if pair[0] not in seen)


async def merge_back(
    repo_dir: Path,
    worktree: Path,
    branch: str,
    *,
    audit: AuditFn = default_audit,
) -> MergeOutcome:
    """Merge ``branch`` (checked out in ``worktree``) into ``repo_dir``'s checkout, under the lock.

    Leaves the worktree and the branch in place (a caller merging in batches keeps working);
    :func:`finalize_worktree` is the one-shot form that also cleans up.
    """
    async with merge_lock(repo_dir):
        return await _merge_locked(Path(repo_dir), Path(worktree), branch, audit)


async def finalize_worktree(
    repo_dir: Path,
    worktree: Worktree,
    *,
    succeeded: bool = True,
    audit: AuditFn = default_audit,
) -> MergeOutcome:
    """Finalise a subagent run (turn-loop 5.15): merge or keep, then always remove the worktree.

    A failed run that left commits keeps its branch unmerged (``REASON_FAILED``). The branch is
    deleted only when ``HEAD`` contains its commits. Cleanup is shielded from cancellation.
    """
    repo = Path(repo_dir)
    outcome: MergeOutcome | None = None
    try:
        async with merge_lock(repo):
            if succeeded:
                outcome = await _merge_locked(repo, worktree.path, worktree.branch, audit)
            else:
                tip = await _clean_worktree(worktree.path)
                head, _ = await _parent_state(repo)
                listed = await arun(repo, "rev-list", "--reverse", f"{head}..{tip}", harness=True)
                commits = tuple(listed.stdout.split())
                if commits:
                    files = await _changed_files(repo, head, tip)
                    outcome = MergeOutcome("kept", REASON_FAILED, worktree.branch, commits, files, head)
                else:
                    outcome = MergeOutcome("no_changes", None, worktree.branch, (), (), head)
    finally:
        with CancelScope(shield=True):
            await remove_worktree(repo, worktree)
            if outcome is not None and outcome.status != "kept":
                await _delete_merged_branch(repo, worktree.branch)
    return outcome


async def _delete_merged_branch(repo: Path, branch: str) -> None:
    """Delete ``branch`` only if ``HEAD`` contains it (never drops a commit)."""
    ref = f"refs/heads/{branch}"
    tip = await arun(repo, "rev-parse", "--verify", "-q", ref, check=False, harness=True)
    if not tip.ok:
        return
    contained = await arun(repo, "merge-base", "--is-ancestor", tip.stdout.strip(), "HEAD", check=False, harness=True)
    if contained.ok:
        await arun(repo, "update-ref", "-d", ref, tip.stdout.strip(), check=False, harness=True)
        await arun(repo, "update-ref", "-d", _pin_ref(branch), check=False, harness=True)


async def resolve_branch(repo_dir: Path, name_or_id: str) -> str:
    """A ``reverie/…`` branch name from itself or its id; ``ReflectionBranchError`` (one line) if unknown."""
    candidates = await list_reflections(Path(repo_dir), kind=None)
    for item in candidates:
        if name_or_id in (item.branch, item.id, f"refs/heads/{item.branch}"):
            return item.branch
    raise ReflectionBranchError(f"no reflection branch {name_or_id!r} in {repo_dir} (see `reverie reflections list`)")


async def merge_branch(repo_dir: Path, name_or_id: str, *, audit: AuditFn = default_audit) -> MergeOutcome:
    """Retry merge-back of a kept branch (``reverie reflections merge ID``).

    Uses the branch's worktree if it still has one, else a temporary worktree that is removed
    afterwards; the branch is deleted once merged.
    """
    repo = Path(repo_dir)
    branch = await resolve_branch(repo, name_or_id)
    existing = {b.branch: b for b in await list_reflections(repo, kind=None)}[branch].worktree
    temporary: Path | None = None
    if existing is None:
        bid = id_from_branch(branch) or "branch"
        temporary = worktrees_root() / "_merge" / f"merge-{bid}"
        await AsyncPath(temporary.parent).mkdir(parents=True, exist_ok=True)
        async with worktree_admin_lock(repo):
            await arun(repo, "worktree", "add", "--quiet", str(temporary), branch, harness=True)
    try:
        outcome = await merge_back(repo, existing or temporary or repo, branch, audit=audit)
    finally:
        with CancelScope(shield=True):
            if temporary is not None:
                await remove_worktree(repo, temporary)
    if outcome.status != "kept":
        with CancelScope(shield=True):
            if existing is not None:
                await remove_worktree(repo, existing)
            await _delete_merged_branch(repo, branch)
    return outcome


async def discard_branch(repo_dir: Path, name_or_id: str) -> tuple[str, ...]:
    """Delete a reflection branch and its worktree on the user's explicit request.

    Returns the commits that ``HEAD`` does not contain (what the user chose to drop).
    """
    repo = Path(repo_dir)
    branch = await resolve_branch(repo, name_or_id)
    if not branch.startswith(BRANCH_PREFIX):
        raise ReflectionBranchError(f"refusing to discard {branch!r}: not a reverie branch")
    item = {b.branch: b for b in await list_reflections(repo, kind=None)}[branch]
    async with merge_lock(repo):
        dropped = await arun(repo, "rev-list", "--reverse", f"HEAD..{item.tip}", harness=True)
        with CancelScope(shield=True):
            if item.worktree is not None:
                await remove_worktree(repo, item.worktree)
            await arun(repo, "update-ref", "-d", f"refs/heads/{branch}", item.tip, harness=True)
            await arun(repo, "update-ref", "-d", _pin_ref(branch), check=False, harness=True)
    return tuple(dropped.stdout.split())

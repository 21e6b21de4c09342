"""Merge-back of a subagent branch into the memory checkout (D1-D3, R2-R4, M8).

Under the repository lock (D1) the branch is rebased onto the parent's ``HEAD`` in the subagent's
worktree, the candidate tree is audited in-process (M8) and the parent fast-forwards; the lock is
never held across a model call (A5), so a resolver works on a conflict between two locked phases.
Outcomes are D2's (``merged``, ``resolved``, ``no_changes``, ``pending``, ``kept``, ``failed``); no
commit is ever dropped (pin refs, ``--empty=keep``) and a full disk leaves both checkouts consistent
(O9). One module because merge-back is one state machine under one lock whose steps share the
invariant "every commit stays reachable". The walk-through, the outcome cases, the fault steps
(S29) and the recovery rules are in docs/architecture.md, "Merge-back"."""

from __future__ import annotations

import contextlib
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, replace
from functools import partial
from pathlib import Path
from typing import Literal

from anyio import CancelScope
from anyio import Path as AsyncPath

from orchestrator.base import blocking
from orchestrator.base.faults import fault_point
from orchestrator.memfs import operations
from orchestrator.memfs.combined import REASON_INVALID, REASON_INVALID_COMBINED, judge_combination
from orchestrator.memfs.errors import GitError, MemfsError
from orchestrator.memfs.git import GitRepo
from orchestrator.memfs.gitprocess import GitResult
from orchestrator.memfs.localrepo import LocalRepo
from orchestrator.memfs.locks import merge_lock, worktree_admin_lock
from orchestrator.memfs.names import PRE_REBASE_REF_PREFIX
from orchestrator.memfs.parent import witness
from orchestrator.memfs.resolution import (
    Resolver,
    ResolverFailed,
    check_linear,
    conflicted_files,
    resolve_rebase,
)
from orchestrator.memfs.validator import audit_head
from orchestrator.memfs.worktree_reset import abort_rebase, clean_worktree
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
    "PRE_REBASE_REF_PREFIX",
    "RACE_ATTEMPTS",
    "RESOLVE_PHASES",
    "REASON_BUSY",
    "REASON_CONFLICT",
    "REASON_DIRTY",
    "REASON_FAILED",
    "REASON_INVALID",
    "REASON_INVALID_COMBINED",
    "AuditFn",
    "MergeOutcome",
    "MergeStatus",
    "ReasonCode",
    "ReflectionBranchError",
    "default_audit",
    "delete_merged_branch",
    "discard_branch",
    "finalize_worktree",
    "merge_back",
    "merge_branch",
    "resolve_branch",
    "resolver_reason",
]

MergeStatus = Literal["merged", "resolved", "no_changes", "pending", "kept", "failed"]
ReasonCode = Literal["conflict", "invalid", "invalid-combined", "failed", "dirty", "busy"]
AuditFn = Callable[[Path, str, str | None], Awaitable[tuple[str, ...]]]
"""``(checkout, revision, accepted_base) -> error lines`` (empty when valid)."""

REASON_CONFLICT = "conflicts with newer memory changes"
REASON_DIRTY = "the memory repository had uncommitted changes"
REASON_FAILED = "the reflection failed before finishing"
REASON_BUSY = "the memory repository kept changing during the merge"
FAULT_STEPS = ("locked", "before-rebase", "between-rebase-and-ff", "after-ff")
"""merge-back's fault steps (:mod:`orchestrator.base.faults`), in the order a merge reaches them."""
RACE_ATTEMPTS = 25
RESOLVE_PHASES = 5
_MAX_RESOLVE_ROUNDS = 50


class ReflectionBranchError(MemfsError, ValueError):
    """The named reflection branch does not exist, or is not reverie's to discard."""


def resolver_reason(why: str) -> str:
    """D3's S12 reason for a conflict the resolver could not reconcile."""
    return f"the resolver could not reconcile the changes: {why}"


@dataclass(frozen=True)
class MergeOutcome:
    """What merge-back did (D2). ``commits`` are the branch's commits (after the rebase when merged).

    ``reason`` is the S12 text, ``reason_code`` D2's code (``None`` for merged/resolved/no_changes).
    ``files``: the conflicting files on a conflict, else the files the branch changes.
    ``new_head``: the parent's ``HEAD`` afterwards. ``retried``: how many times ``HEAD`` moved under
    the merge and it started over. ``resolved_files``: what a resolver reconciled. ``bypassed``:
    commits that reached ``HEAD`` while this merge held the repository lock, so made by a git that
    skipped reverie's wrapper; folded in (the branch was rebased onto them).
    """

    status: MergeStatus
    reason: str | None
    branch: str
    commits: tuple[str, ...]
    files: tuple[str, ...]
    new_head: str | None
    rewritten: tuple[tuple[str, str], ...] = ()
    errors: tuple[str, ...] = ()
    reason_code: ReasonCode | None = None
    retried: int = 0
    resolved_files: tuple[str, ...] = ()
    bypassed: tuple[str, ...] = ()

    @property
    def commit_count(self) -> int:
        return len(self.commits)

    @property
    def settled(self) -> bool:
        """Whether the branch's fate is decided (only ``pending`` waits for a retry)."""
        return self.status != "pending"

    @property
    def in_head(self) -> bool:
        return self.status in {"merged", "resolved", "no_changes"}


async def default_audit(checkout: Path, revision: str, base: str | None) -> tuple[str, ...]:
    """The MemFS validator's audit (frontmatter rules and tree constraints, S13) in a thread."""
    result = await blocking.run_sync("git", lambda: audit_head(checkout, revision=revision, base=base))
    return tuple(result.errors)


def _state(untracked: str) -> Callable[[LocalRepo], tuple[str | None, frozenset[str]]]:
    """``(HEAD or None when unborn, paths with uncommitted changes)``, asked in-process; renames
    name both paths."""
    return lambda repo: (repo.head(), frozenset(path for _, path in repo.status(untracked)))


async def _parent_state(repo_dir: Path) -> tuple[str, frozenset[str]]:
    head, dirty = await GitRepo(repo_dir).ask(_state("all"))
    if head is None:
        raise GitError(("status",), 1, f"{repo_dir}: the memory repository has no commits")
    return head, dirty


def _survey(
    repo_dir: Path, worktree: Path, tip: str
) -> tuple[str, frozenset[str], tuple[str, ...], tuple[str, ...], tuple[str, ...]]:
    """One worker job for an attempt's questions: the parent's ``HEAD`` and dirty paths, then the
    branch's commits behind and ahead of it and the files it changes (empty when git cannot say)."""
    head, dirty = GitRepo(repo_dir).read(_state("all"))
    if head is None:
        raise GitError(("status",), 1, f"{repo_dir}: the memory repository has no commits")

    def branch(repo: LocalRepo) -> tuple[tuple[str, ...], tuple[str, ...], tuple[str, ...]]:
        behind, commits = repo.commits(tip, head), repo.commits(head, tip)
        files: tuple[str, ...] = ()
        if commits:
            try:
                files = repo.changed_paths(head, tip)
            except GitError:
                files = ()
        return behind, commits, files

    return (head, dirty, *GitRepo(worktree).read(branch))


def _fast_forward(repo_dir: Path, worktree: Path, head: str, tip: str) -> tuple[str | None, tuple[str, ...]]:
    """``LocalRepo.fast_forward`` of the parent from ``head`` (a compare-and-swap) and the files the
    branch changes, in one job."""
    moved = GitRepo(repo_dir).read(lambda repo: repo.fast_forward(tip, expected=head))
    try:
        files = GitRepo(worktree).read(lambda repo: repo.changed_paths(head, tip))
    except GitError:
        files = ()
    return moved, files


async def _changed_files(checkout: Path, base: str, tip: str) -> tuple[str, ...]:
    try:
        return await GitRepo(checkout).ask(lambda repo: repo.changed_paths(base, tip))
    except GitError:
        return ()


def _touches(dirty: frozenset[str], files: tuple[str, ...]) -> bool:
    """Whether an uncommitted path is one the branch changes (or a directory above/below one)."""
    for path in dirty:
        stem = path.rstrip("/")
        for rel in files:
            if rel == stem or rel.startswith(stem + "/") or stem.startswith(rel + "/"):
                return True
    return False


def _pin_ref(branch: str) -> str:
    return PRE_REBASE_REF_PREFIX + (id_from_branch(branch) or branch.replace("/", "-"))


class _Raced(Exception):
    """``HEAD`` moved between the rebase and the fast-forward: start over (under the lock)."""


@dataclass(frozen=True)
class _Stopped:
    """A rebase stopped on a conflict for the resolver: left in progress in the worktree, onto
    ``head``, replaying ``commits``; the locked phase ends here so the lock is released."""

    head: str
    commits: tuple[str, ...]
    conflicted: tuple[str, ...]
    stderr: str


@dataclass
class _Merge:
    """One merge-back under the lock; mutable across its retries."""

    repo: Path
    worktree: Path
    branch: str
    audit: AuditFn
    resolver: Resolver | None
    keep_checkout: bool = True
    tip: str = ""
    original_tip: str = ""
    rewritten: tuple[tuple[str, str], ...] = ()
    pinned: bool = False
    retried: int = 0
    resolved_files: tuple[str, ...] = ()
    head: str = ""
    stale_checkout: bool = False
    bypassed: tuple[str, ...] = ()

    def outcome(self, status: MergeStatus, commits: tuple[str, ...], files: tuple[str, ...], **kw: object) -> MergeOutcome:
        base = MergeOutcome(
            status, None, self.branch, commits, files, self.head, self.rewritten,
            retried=self.retried, resolved_files=self.resolved_files, bypassed=self.bypassed,
        )
        return replace(base, **kw)  # type: ignore[arg-type]

    async def unpin(self) -> None:
        if self.pinned:
            with CancelScope(shield=True):
                pin, tip = _pin_ref(self.branch), self.original_tip
                await GitRepo(self.repo).ask(lambda repo: repo.delete_ref(pin, expected=tip))
            self.pinned = False

    async def run(self) -> MergeOutcome:
        """The pin lives only while a rebase may be in flight: whatever the outcome, by the time
        this returns the branch ref holds the (rebased or restored) commits, so it is removed."""
        try:
            return await self._run()
        finally:
            await self.unpin()

    async def _run(self) -> MergeOutcome:
        """Locked phases, with the resolver's work between them outside the lock."""
        for phase in range(RESOLVE_PHASES + 1):
            async with merge_lock(self.repo):
                if phase == 0:
                    await fault_point("locked")
                    self.tip = self.original_tip = await clean_worktree(self.worktree, self.branch)
                result = await self._locked_phase()
            if isinstance(result, MergeOutcome):
                return result
            if phase == RESOLVE_PHASES:
                return await self._abort_kept(
                    result.head, result.conflicted, result.stderr, f"memory kept changing over {RESOLVE_PHASES} resolutions"
                )
            kept = await self._resolve(result)
            if kept is not None:
                return kept
        raise AssertionError("unreachable: the last phase returns")

    async def _locked_phase(self) -> MergeOutcome | _Stopped:
        """Attempts under one hold of the lock, retried while ``HEAD`` moves (a git outside the
        wrapper); ``_Stopped`` hands a conflict to the resolver."""
        self.head = ""
        # lazy: only a merge-back needs tenacity, not `chat -p` start-up
        from tenacity import (
            AsyncRetrying,
            retry_if_exception_type,
            stop_after_attempt,
            wait_random_exponential,
        )

        result: MergeOutcome | _Stopped | None = None
        async for attempt in AsyncRetrying(
            stop=stop_after_attempt(RACE_ATTEMPTS),
            wait=wait_random_exponential(multiplier=0.005, max=0.25),
            retry=retry_if_exception_type(_Raced),
            retry_error_callback=lambda _state: None,
        ):
            with attempt:
                if attempt.retry_state.attempt_number > 1:
                    self.retried += 1
                result = await self._attempt()
        if result is None:
            commits = await self._commits_since(self.head)
            files = await _changed_files(self.worktree, self.head, self.tip)
            return self.outcome("pending", commits, files, reason=REASON_BUSY, reason_code="busy")
        return result

    async def _note_bypass(self, before: str, after: str) -> None:
        """``HEAD`` moved while the lock was held: only a git outside the wrapper can do that."""
        try:
            found = await GitRepo(self.repo).ask(lambda repo: repo.commits(before, after))
        except GitError:
            found = (after,)
        self.bypassed = tuple(dict.fromkeys((*self.bypassed, *found)))

    async def _commits_since(self, head: str) -> tuple[str, ...]:
        tip = self.tip
        try:
            return await GitRepo(self.worktree).ask(lambda repo: repo.commits(head, tip))
        except GitError:
            return ()

    async def _attempt(self) -> MergeOutcome | _Stopped:
        head, dirty, behind, commits, files = await blocking.run_sync(
            "git", partial(_survey, self.repo, self.worktree, self.tip)
        )
        if self.head and head != self.head:
            await self._note_bypass(self.head, head)
        self.head = head
        if not commits:
            await self.unpin()
            return self.outcome("no_changes", (), ())
        if dirty and _touches(dirty, files):
            return self.outcome("pending", commits, files, reason=REASON_DIRTY, reason_code="dirty")
        if behind:
            rebased = await self._rebase(head, commits)
            if isinstance(rebased, (MergeOutcome, _Stopped)):
                return rebased
            if not rebased:
                await self.unpin()
                return self.outcome("no_changes", (), ())
            commits = rebased
        verdict = await judge_combination(self.audit, self.worktree, head=head, tip=self.tip, own_tip=self.original_tip)
        if not verdict.ok:
            files = await _changed_files(self.worktree, head, self.tip)
            return self.outcome(
                "kept", commits, files, reason=verdict.reason, reason_code=verdict.reason_code, errors=verdict.errors
            )
        moved, files = await blocking.run_sync("git", partial(_fast_forward, self.repo, self.worktree, head, self.tip))
        ff = GitResult(0, b"", b"") if moved == "done" else None
        if moved is None:
            ff = await GitRepo(self.repo).arun("merge", "--ff-only", "-q", self.tip, check=False, harness=True, retry=True)
            files = await _changed_files(self.worktree, head, self.tip)
        if ff is not None and ff.ok:
            await blocking.run_sync("files", partial(witness, self.repo, self.tip))
            await fault_point("after-ff")
            await self.unpin()
            status: MergeStatus = "resolved" if self.resolved_files else "merged"
            return replace(self.outcome(status, commits, files), new_head=self.tip)
        if moved == "dirty":
            return self.outcome("pending", commits, files, reason=REASON_DIRTY, reason_code="dirty")
        if moved in ("moved", "busy") or ff is None:
            raise _Raced
        message = ff.stderr
        if "would be overwritten" in message or "untracked working tree files" in message:
            return self.outcome("pending", commits, files, reason=REASON_DIRTY, reason_code="dirty")
        if "fast-forward" in message:
            raise _Raced
        line = next((x for x in message.splitlines() if x.strip()), f"exit {ff.returncode}")
        # git checked the paths were clean before writing; what it wrote before failing goes.
        tip = self.tip
        await GitRepo(self.repo).ask(lambda repo: repo.restore_files(head, tip) if repo.head() == head else None)
        return self.outcome("failed", commits, files, errors=(f"git merge --ff-only: {line}",))

    async def _rebase(self, head: str, commits: tuple[str, ...]) -> tuple[str, ...] | MergeOutcome | _Stopped:
        if not self.pinned:
            # Create-only: an older pin (an earlier interrupted merge) keeps its older commits.
            pin, tip = _pin_ref(self.branch), self.original_tip
            self.pinned = await GitRepo(self.repo).ask(lambda repo: repo.set_ref(pin, tip, expected=""))
        await fault_point("before-rebase")
        keep = self.keep_checkout
        replayed = await GitRepo(self.worktree).ask(lambda repo: repo.rebase_onto(head, checkout=keep))
        if replayed is not None:
            self.stale_checkout = not keep
            rebase = GitResult(0, b"", b"")
        else:
            if self.stale_checkout:
                await GitRepo(self.worktree).ask(lambda repo: repo.checkout_head())
                self.stale_checkout = False
            rebase = await GitRepo(self.worktree).arun("rebase", "-q", "--empty=keep", "--no-autosquash", head, check=False, harness=True, retry=True)
            if not rebase.ok:
                await operations.record(self.worktree)  # what reverie's git left, to check before going on
        if not rebase.ok:
            conflicted = await conflicted_files(self.worktree)
            if not conflicted:
                # Not a conflict: git itself failed (a full disk among the causes), so ``failed``.
                await abort_rebase(self.worktree, self.branch)
                raise GitError(("rebase",), rebase.returncode, rebase.stderr, self.worktree)
            if self.resolver is not None:
                return _Stopped(head, commits, conflicted, rebase.stderr)
            return await self._abort_kept(head, conflicted, rebase.stderr, None)
        new_commits = replayed if replayed is not None else await GitRepo(self.worktree).ask(lambda repo: repo.commits(head, "HEAD"))
        self._replaced(head, commits, new_commits)
        await fault_point("between-rebase-and-ff")
        return new_commits

    def _replaced(self, head: str, commits: tuple[str, ...], new_commits: tuple[str, ...]) -> None:
        if len(new_commits) == len(commits):
            self.rewritten = _compose(self.rewritten, tuple(zip(commits, new_commits, strict=True)))
        # git rebase drops commits whose change HEAD already has: then nothing is left to merge.
        self.tip = new_commits[-1] if new_commits else head

    async def _resolve(self, stopped: _Stopped) -> MergeOutcome | None:
        """The resolver's turn, without the lock: the rebase stopped in the worktree is driven to
        its end; None when it produced a linear history on ``stopped.head`` (the next locked phase
        merges it), else the branch is restored and kept with D3's reason."""
        assert self.resolver is not None
        self.head = stopped.head
        why: str | None = None
        try:
            resolved = await resolve_rebase(
                self.worktree, branch=self.branch, onto=stopped.head, resolver=self.resolver,
                lock_held=None, max_rounds=_MAX_RESOLVE_ROUNDS,
            )
        except ResolverFailed as exc:
            why = str(exc) or "no reason given"
        else:
            new_tip = await GitRepo(self.worktree).ask(_head)
            why = await check_linear(self.worktree, stopped.head, new_tip)
        if why is not None:
            return await self._abort_kept(stopped.head, stopped.conflicted, stopped.stderr, why)
        self.resolved_files = tuple(dict.fromkeys((*self.resolved_files, *resolved)))
        head = stopped.head
        new_commits = await GitRepo(self.worktree).ask(lambda repo: repo.commits(head, "HEAD"))
        self._replaced(head, stopped.commits, new_commits)
        return None

    async def _abort_kept(self, head: str, conflicted: tuple[str, ...], stderr: str, why: str | None) -> MergeOutcome:
        await abort_rebase(self.worktree, self.branch)
        restored = await GitRepo(self.worktree).ask(_head)
        if restored != self.original_tip:
            # A resolver that finished the rebase wrongly: put the branch back where it was.
            await GitRepo(self.worktree).arun("reset", "-q", "--hard", self.original_tip, harness=True, retry=True)
            restored = self.original_tip
        self.tip = restored
        await self.unpin()
        old_commits = await self._commits_since(head)
        files = conflicted or await _changed_files(self.worktree, head, restored)
        reason = REASON_CONFLICT if why is None else resolver_reason(why)
        errors = tuple((stderr.strip().splitlines() or ["rebase failed"])[-1:]) if why is None else (why,)
        return replace(
            self.outcome("kept", old_commits, files, reason=reason, reason_code="conflict", errors=errors),
            rewritten=self.rewritten,
        )


def _compose(
    earlier: tuple[tuple[str, str], ...], later: tuple[tuple[str, str], ...]
) -> tuple[tuple[str, str], ...]:
    """Chain two rewrite maps: original → latest."""
    step = dict(later)
    chained = tuple((old, step.get(mid, mid)) for old, mid in earlier)
    seen = {mid for _, mid in earlier}
    return chained + tuple(pair for pair in later if pair[0] not in seen)


async def _merge(
    repo: Path, worktree: Path, branch: str, audit: AuditFn, resolver: Resolver | None,
    *, keep_checkout: bool = True,
) -> MergeOutcome:
    """One merge-back; it takes the repository lock for its locked phases itself.

    ``keep_checkout=False`` (the worktree is deleted straight after): an in-memory rebase moves
    the branch without checking it out in the worktree, which is brought up to date only if git's
    own rebase has to run there after all."""
    merge = _Merge(repo, worktree, branch, audit, resolver, keep_checkout)
    try:
        return await merge.run()
    except (GitError, OSError) as exc:
        # OSError: libgit2 reports a full disk or an unwritable file as one (ENOSPC, EACCES).
        with CancelScope(shield=True):
            if await (AsyncPath(worktree)).exists():
                # Still failing (the disk is still full): the next merge-back aborts it first.
                with contextlib.suppress(GitError, OSError):
                    await abort_rebase(worktree, branch)
        return MergeOutcome("failed", None, branch, (), (), merge.head or None, merge.rewritten, errors=(str(exc),))


async def merge_back(
    repo_dir: Path,
    worktree: Path,
    branch: str,
    *,
    audit: AuditFn = default_audit,
    resolver: Resolver | None = None,
) -> MergeOutcome:
    """Merge ``branch`` (checked out in ``worktree``) into ``repo_dir``'s checkout, under the lock.

    ``resolver`` (D3's ``resolve`` policy) reconciles conflicts inside the rebase, outside the lock;
    without one a conflict keeps the branch. Leaves the worktree and the branch in place (a caller
    merging in batches keeps working); :func:`finalize_worktree` is the one-shot form that also
    cleans up.
    """
    return await _merge(Path(repo_dir), Path(worktree), branch, audit, resolver)


async def finalize_worktree(
    repo_dir: Path,
    worktree: Worktree,
    *,
    succeeded: bool = True,
    audit: AuditFn = default_audit,
    resolver: Resolver | None = None,
) -> MergeOutcome:
    """Finalise a subagent run (TURN-5.15): merge or keep, then always remove the worktree.

    A failed run that left commits keeps its branch unmerged (``failed`` reason). The branch is
    deleted only when ``HEAD`` contains its commits. Cleanup is shielded from cancellation.
    """
    repo = Path(repo_dir)
    outcome: MergeOutcome | None = None
    try:
        if succeeded:
            outcome = await _merge(repo, worktree.path, worktree.branch, audit, resolver, keep_checkout=False)
        else:
            async with merge_lock(repo):
                tip = await clean_worktree(worktree.path, worktree.branch)
                head, _ = await _parent_state(repo)
                commits = await GitRepo(repo).ask(lambda local: local.commits(head, tip))
                if commits:
                    files = await _changed_files(repo, head, tip)
                    outcome = MergeOutcome(
                        "kept", REASON_FAILED, worktree.branch, commits, files, head, reason_code="failed"
                    )
                else:
                    outcome = MergeOutcome("no_changes", None, worktree.branch, (), (), head)
    finally:
        with CancelScope(shield=True):
            await remove_worktree(repo, worktree)
            if outcome is not None and outcome.in_head:
                await delete_merged_branch(repo, worktree.branch)
    return outcome


async def delete_merged_branch(repo: Path, branch: str) -> None:
    """Delete ``branch`` only if ``HEAD`` contains it (never drops a commit), and its pin."""
    await GitRepo(repo).ask(lambda local: _delete_if_merged(local, branch))


def _delete_if_merged(repo: LocalRepo, branch: str) -> None:
    ref = f"refs/heads/{branch}"
    found = repo.ref(ref)
    head = repo.head()
    if found is not None and (head is None or not repo.is_ancestor(found, head)):
        return
    if found is not None:
        repo.delete_ref(ref, expected=found)
    repo.delete_ref(_pin_ref(branch))


async def resolve_branch(repo_dir: Path, name_or_id: str) -> str:
    """A ``reverie/…`` branch name from itself or its id; ``ReflectionBranchError`` (one line) if unknown."""
    candidates = await list_reflections(Path(repo_dir), kind=None)
    for item in candidates:
        if name_or_id in (item.branch, item.id, f"refs/heads/{item.branch}"):
            return item.branch
    raise ReflectionBranchError(f"no reflection branch {name_or_id!r} in {repo_dir} (see `reverie reflections list`)")


async def merge_branch(
    repo_dir: Path, name_or_id: str, *, audit: AuditFn = default_audit, resolver: Resolver | None = None
) -> MergeOutcome:
    """Retry merge-back of a pending or kept branch (turn ends, start-up, ``reverie reflections merge``).

    Uses the branch's worktree if it still has one, else a temporary worktree that is removed
    afterwards; the branch is deleted once its commits are in ``HEAD``.
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
            if await AsyncPath(temporary).exists():
                await GitRepo(repo).arun("worktree", "remove", "--force", "--force", str(temporary), check=False, harness=True)
                await GitRepo(repo).arun("worktree", "prune", check=False, harness=True)
            await GitRepo(repo).arun("worktree", "add", "--quiet", str(temporary), branch, harness=True)
    try:
        outcome = await merge_back(repo, existing or temporary or repo, branch, audit=audit, resolver=resolver)
    finally:
        with CancelScope(shield=True):
            if temporary is not None:
                await remove_worktree(repo, temporary)
    if outcome.in_head:
        with CancelScope(shield=True):
            if existing is not None:
                await remove_worktree(repo, existing)
            await delete_merged_branch(repo, branch)
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
        dropped = await GitRepo(repo).arun("rev-list", "--reverse", f"HEAD..{item.tip}", harness=True)
        with CancelScope(shield=True):
            if item.worktree is not None:
                await remove_worktree(repo, item.worktree)
            await GitRepo(repo).arun("update-ref", "-d", f"refs/heads/{branch}", item.tip, harness=True)
            await GitRepo(repo).arun("update-ref", "-d", _pin_ref(branch), check=False, harness=True)
    return tuple(dropped.stdout.split())


def _head(repo: LocalRepo) -> str:
    head = repo.head()
    if head is None:
        raise GitError(("rev-parse", "HEAD"), 128, "fatal: HEAD names no commit", repo.top_level)
    return head

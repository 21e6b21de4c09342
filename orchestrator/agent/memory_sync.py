"""Post-turn memory sync (TURN-4.2 and TURN-4.7): classify the checkout after every turn and
say what the agent must be reminded of at the start of its next turn.

``after_turn`` is the entry point of the turn loop: it waits for the repository's lock
(D1, replacing TURN-4.7 item 2's "try without waiting"), bounded by ``SYNC_LOCK_WAIT_SECONDS``, and
skips the sync silently (``None``) only if that runs out, so a half-done rebase of a merge is never
reported to the agent as a conflict and a merge never makes the agent miss a sync. ``check_memory`` is the
blocking part (git) and runs in a worker thread under that lock; the decision of which reminder a
status produces is pure (``orchestrator.agent.reminders.sync_reminder``). Push and ``pull --rebase`` run
only when the repository has an ``origin`` remote, retried with tenacity (3 attempts, waiting
500 ms then 1000 ms) only on the reference's transient errors (``is_transient_git_error``); the
rebased tip is audited again before the second push (4.2 check 10).
"""

from __future__ import annotations

import re
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, replace
from functools import partial
from pathlib import Path

from orchestrator.agent.audit import audit_errors
from orchestrator.agent.reminders import memory_invalid_reminder, sync_reminder
from orchestrator.base import blocking
from orchestrator.memfs.errors import GitError
from orchestrator.memfs.gitdir import is_repository
from orchestrator.memfs.guard import RepositoryRefused, drain_findings, locate, report
from orchestrator.memfs.lockowner import LockHolder
from orchestrator.memfs.locks import LockBusy, call_if_free, common_dir_sync, merge_lock
from orchestrator.memfs.operations import record_sync, settle
from orchestrator.memfs.remote import ahead_of_upstream, pull_rebase, push_head
from orchestrator.memfs.repo import (
    RepoStatus,
    head_revision,
    missing_objects,
    repair_index,
    repo_status,
    take_failed_commit,
)

__all__ = [
    "SYNC_LOCK_WAIT_SECONDS",
    "SyncResult",
    "after_turn",
    "check_memory",
    "conflict_summary",
    "is_transient_git_error",
    "sync_reminder_for",
]

_NON_FAST_FORWARD = re.compile(
    r"non-fast-forward|fetch first|failed to push some refs|updates were rejected|"
    r"remote contains work that you do not have locally|tip of your current branch is behind",
    re.IGNORECASE,
)
_HTTP_52X = re.compile(r"(?:HTTP|returned error:)\s*52[0-4]\b", re.IGNORECASE)
_NETWORK_FAILURE = re.compile(
    r"remote end hung up unexpectedly|connection reset by peer|operation timed out|timed out|SIGTERM|ETIMEDOUT",
    re.IGNORECASE,
)


SYNC_LOCK_WAIT_SECONDS = 30.0
_SYNC_SOURCE = "a turn's memory sync"
"""What this hold is, as the lock's owner record tells another process waiting for it (V7)."""


@dataclass(frozen=True)
class SyncResult:
    """The post-turn sync's classification of the checkout and the summary its reminder carries."""

    status: str
    summary: str
    memory_dir: str
    local_only: bool
    revision: str | None = None
    audit_errors: tuple[str, ...] = ()
    warnings: tuple[str, ...] = ()
    """One line each: what reverie found wrong with the repository itself during this turn and
    repaired or refused (``memfs.guard``), shown in the turn's output and json result."""


def conflict_summary(status: RepoStatus) -> str:
    parts = []
    if status.operation:
        parts.append(status.operation)
    if status.conflicted:
        shown = ", ".join(status.conflicted[:10])
        extra = len(status.conflicted) - 10
        parts.append("conflicted file(s): " + shown + (f", and {extra} more" if extra > 0 else ""))
    return "; ".join(parts)


def is_transient_git_error(text: str) -> bool:
    """4.2 "Git details": an HTTP 520-524 response, or ``RPC failed`` together with a network failure
    text; anything else (authentication, a rejected push, a missing remote) is not retried."""
    if _HTTP_52X.search(text):
        return True
    return "rpc failed" in text.lower() and bool(_NETWORK_FAILURE.search(text))


async def after_turn(
    memory_dir: Path,
    *,
    audit: Callable[[Path, str], tuple[str, ...]] | None = None,
    on_wait: Callable[[LockHolder | None], Awaitable[None]] | None = None,
) -> SyncResult | None:
    """The post-turn sync of TURN-4.7 under the repository lock (D1): ``None`` when the lock stayed busy
    for ``SYNC_LOCK_WAIT_SECONDS`` (skipped for this turn), else the ordered checks' result.
    ``on_wait`` is awaited once when the sync is about to wait behind another process's hold (V5),
    with the holder its lock's owner record names (V7).

    The repository's git common directory (the lock's home) is asked once per process and memory
    directory (in the same hop as whether there is a repository at all), so a turn whose lock is
    free pays one worker hop: take the lock, check, release. A repository that went away since (its
    lock file cannot be created) is asked about afresh."""
    check = partial(_boxed, partial(check_memory, memory_dir, audit=audit))
    common = _common_dirs.get(memory_dir)
    if common is None:
        found = await blocking.run_sync("git", partial(_common_dir_if_git, memory_dir))
        if found is None:
            return await blocking.run_sync("git", partial(check_memory, memory_dir, audit=audit))
        common = _common_dirs[memory_dir] = found
    try:
        free, boxed = await call_if_free(memory_dir, check, common_dir=common)
    except FileNotFoundError:
        if _common_dirs.pop(memory_dir, None) is None:
            raise
        return await after_turn(memory_dir, audit=audit, on_wait=on_wait)
    if free and boxed is not None:
        result, error = boxed
        if error is not None:
            raise error
        assert result is not None
        return result
    try:
        async with merge_lock(
            memory_dir, max_wait=SYNC_LOCK_WAIT_SECONDS, common_dir=common, on_wait=on_wait, source=_SYNC_SOURCE
        ):
            return await blocking.run_sync("git", partial(check_memory, memory_dir, audit=audit))
    except LockBusy:
        return None


_common_dirs: dict[Path, Path] = {}


def _boxed(fn: Callable[[], SyncResult]) -> tuple[SyncResult | None, Exception | None]:
    """The checks' own failure, told apart from the lock's (a missing lock directory)."""
    try:
        return fn(), None
    except Exception as exc:
        return None, exc


def _common_dir_if_git(memory_dir: Path) -> Path | None:
    """The git common directory of ``memory_dir``, or None when it has no ``.git`` at all."""
    return common_dir_sync(memory_dir) if is_repository(memory_dir) else None


def check_memory(
    memory_dir: Path,
    *,
    audit: Callable[[Path, str], tuple[str, ...]] | None = None,
) -> SyncResult:
    """The ordered checks; ``audit`` returns the HEAD audit's error lines (M8), default the validator.
    What the guard found in the repository since the last check rides along as ``warnings``."""
    try:
        result = _checks(memory_dir, audit)
    except RepositoryRefused as refused:
        result = SyncResult("refused", str(refused), str(memory_dir), True)
    found = tuple(f.message for f in drain_findings(memory_dir))
    return replace(result, warnings=found) if found else result


def _checks(memory_dir: Path, audit: Callable[[Path, str], tuple[str, ...]] | None) -> SyncResult:
    where = str(memory_dir)
    # located once for every step (a ``.git`` of its own: what ``repo_status`` counts as initialized)
    layout = locate(memory_dir) if is_repository(memory_dir) else None
    if audit is None:
        audit = partial(_audit_head, common_dir=None if layout is None else layout.common_dir)
    if layout is not None:
        settle(layout)  # an operation reverie did not start is never reported as a conflict to finish
    repaired = repair_index(memory_dir, layout=layout) if layout is not None else False
    status = repo_status(memory_dir, layout=layout)
    if not status.initialized:
        return SyncResult("skipped", "Memory repo is not initialized.", where, True)
    if status.revision is not None and not repaired:
        _report_missing(memory_dir, status.revision)
    local_only = not status.has_remote
    if status.in_conflict:
        return SyncResult("conflict", conflict_summary(status), where, local_only, status.revision)
    failed = take_failed_commit(memory_dir, layout=layout)
    if status.dirty:
        summary = f"{len(status.porcelain)} uncommitted memory change(s)."
        if failed is not None:
            # A2: a commit that failed is never silent (the user's warning, the agent's reminder)
            report(memory_dir, f"the agent's memory commit did not land: {failed}", restored=False)
            summary += f" Your last commit did not land: {failed}"
        return SyncResult("dirty", summary, where, local_only, status.revision)
    errors = audit(memory_dir, status.revision) if status.revision else ()
    if errors:
        summary = "Committed memory fails validation:\n" + "\n".join(errors)
        return SyncResult("invalid", summary, where, local_only, status.revision, errors)
    if local_only:
        return SyncResult("skipped", "Local backend MemFS has no Letta remote to push.", where, True, status.revision)
    return _push(memory_dir, status, audit)


def _report_missing(memory_dir: Path, revision: str) -> None:
    """A HEAD whose objects are gone is damaged memory: one warning line per commit (A9)."""
    missing = missing_objects(memory_dir, revision)
    if missing and (memory_dir, revision) not in _MISSING_REPORTED:
        _MISSING_REPORTED.add((memory_dir, revision))
        shown = ", ".join(missing[:5]) + (f" and {len(missing) - 5} more" if len(missing) > 5 else "")
        report(
            memory_dir,
            f"{memory_dir}: HEAD {revision[:7]} is missing the objects of {shown}; memory is damaged: run "
            f"`git -C {memory_dir} fsck` and restore them from a backup or a clone",
            restored=False,
        )


_MISSING_REPORTED: set[tuple[Path, str]] = set()


def sync_reminder_for(result: SyncResult) -> str | None:
    """The reminder a status calls for; an audit failure uses reverie's MEMORY INVALID text (S12)."""
    if result.status == "invalid" and result.audit_errors:
        return memory_invalid_reminder((result.revision or "unknown")[:7], result.audit_errors)
    return sync_reminder(result.status, memory_dir=result.memory_dir, summary=result.summary, local_only=result.local_only)


def _audit_head(memory_dir: Path, revision: str, *, common_dir: Path | None = None) -> tuple[str, ...]:
    """The M8 audit of a commit, shared with the audit before the model (each commit once per process)."""
    return audit_errors(memory_dir, revision, common_dir=common_dir)


def _network(step: Callable[[Path], None], memory_dir: Path) -> None:
    # lazy: only a repository with a remote gets here, and `chat -p` starts faster without tenacity
    from tenacity import Retrying, retry_if_exception, stop_after_attempt, wait_chain, wait_fixed

    for attempt in Retrying(
        stop=stop_after_attempt(3),
        wait=wait_chain(wait_fixed(0.5), wait_fixed(1.0)),
        retry=retry_if_exception(lambda e: isinstance(e, GitError) and is_transient_git_error(f"{e.stderr}\n{e}")),
        reraise=True,
    ):
        with attempt:
            step(memory_dir)


def _push(memory_dir: Path, status: RepoStatus, audit: Callable[[Path, str], tuple[str, ...]]) -> SyncResult:
    where = str(memory_dir)
    ahead = ahead_of_upstream(memory_dir)
    if ahead is None or ahead <= 0:
        return SyncResult("clean", "Memory repo is clean and has no pending commits to push.", where, False, status.revision)
    try:
        _network(push_head, memory_dir)
        return SyncResult("pushed", f"Pushed {ahead} pending memory commit(s).", where, False, status.revision)
    except GitError as exc:
        if not _NON_FAST_FORWARD.search(exc.stderr or str(exc)):
            return SyncResult("push_failed", str(exc), where, False, status.revision)
    try:
        _network(pull_rebase, memory_dir)
        rebased = head_revision(memory_dir)
        errors = audit(memory_dir, rebased) if rebased else ()
        if errors:
            summary = "Committed memory fails validation:\n" + "\n".join(errors)
            return SyncResult("invalid", summary, where, False, rebased, errors)
        _network(push_head, memory_dir)
    except GitError as exc:
        record_sync(memory_dir)  # a rebase the pull left stopped is reverie's own (memfs.operations)
        after = repo_status(memory_dir)
        if after.in_conflict:
            return SyncResult("conflict", conflict_summary(after), where, False, after.revision)
        return SyncResult("push_failed", str(exc), where, False, after.revision)
    return SyncResult("pushed", f"Rebased and pushed {ahead} pending memory commit(s).", where, False, rebased)

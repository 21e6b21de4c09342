"""Post-turn memory sync (turn-loop.md 4.2 and 4.7): classify the checkout after every turn and
say what the agent must be reminded of at the start of its next turn.

``check_memory`` is blocking (git) and runs in a worker thread; the decision of which reminder a
status produces is pure (``orchestrator.reminders.sync_reminder``). Push and ``pull --rebase`` run
only when the repository has an ``origin`` remote, retried with tenacity on the reference's
transient-error texts.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from tenacity import Retrying, retry_if_exception, stop_after_attempt, wait_fixed

from orchestrator.memfs.repo import GitError, RepoStatus, repo_status, run_git
from orchestrator.reminders import memory_invalid_reminder, sync_reminder

__all__ = ["SyncResult", "check_memory", "conflict_summary", "sync_reminder_for"]

_NON_FAST_FORWARD = re.compile(
    r"non-fast-forward|fetch first|failed to push some refs|updates were rejected|"
    r"remote contains work that you do not have locally|tip of your current branch is behind",
    re.IGNORECASE,
)
_TRANSIENT = re.compile(
    r"HTTP 52[0-4]|remote end hung up unexpectedly|connection reset by peer|operation timed out|"
    r"timed out|SIGTERM|ETIMEDOUT",
    re.IGNORECASE,
)


@dataclass(frozen=True)
class SyncResult:
    status: str
    summary: str
    memory_dir: str
    local_only: bool
    revision: str | None = None
    audit_errors: tuple[str, ...] = ()


def conflict_summary(status: RepoStatus) -> str:
    parts = []
    if status.operation:
        parts.append(status.operation)
    if status.conflicted:
        shown = ", ".join(status.conflicted[:10])
        extra = len(status.conflicted) - 10
        parts.append("conflicted file(s): " + shown + (f", and {extra} more" if extra > 0 else ""))
    return "; ".join(parts)


def check_memory(
    memory_dir: Path,
    *,
    audit: Callable[[Path, str], tuple[str, ...]] | None = None,
) -> SyncResult:
    """The ordered checks; ``audit`` returns the HEAD audit's error lines (M8), default the validator."""
    if audit is None:
        audit = _audit_head
    where = str(memory_dir)
    status = repo_status(memory_dir)
    if not status.initialized:
        return SyncResult("skipped", "Memory repo is not initialized.", where, True)
    local_only = not status.has_remote
    if status.in_conflict:
        return SyncResult("conflict", conflict_summary(status), where, local_only, status.revision)
    if status.dirty:
        return SyncResult(
            "dirty", f"{len(status.porcelain)} uncommitted memory change(s).", where, local_only, status.revision
        )
    errors = audit(memory_dir, status.revision) if status.revision else ()
    if errors:
        summary = "Committed memory fails validation:\n" + "\n".join(errors)
        return SyncResult("invalid", summary, where, local_only, status.revision, errors)
    if local_only:
        return SyncResult("skipped", "Local backend MemFS has no Letta remote to push.", where, True, status.revision)
    return _push(memory_dir, status)


def sync_reminder_for(result: SyncResult) -> str | None:
    """The reminder a status calls for; an audit failure uses reverie's MEMORY INVALID text (S12)."""
    if result.status == "invalid" and result.audit_errors:
        return memory_invalid_reminder((result.revision or "unknown")[:7], result.audit_errors)
    return sync_reminder(result.status, memory_dir=result.memory_dir, summary=result.summary, local_only=result.local_only)


_AUDITED: dict[tuple[str, str], tuple[str, ...]] = {}
_AUDIT_CACHE_SIZE = 256


def _audit_head(memory_dir: Path, revision: str) -> tuple[str, ...]:
    """The M8 audit of a commit; a commit never changes, so each is audited once per process."""
    from orchestrator.memfs.validator import audit_head

    key = (str(memory_dir), revision)
    if key not in _AUDITED:
        if len(_AUDITED) >= _AUDIT_CACHE_SIZE:
            _AUDITED.pop(next(iter(_AUDITED)))
        _AUDITED[key] = tuple(audit_head(memory_dir, revision=revision).errors)
    return _AUDITED[key]


def _network(memory_dir: Path, *args: str) -> None:
    for attempt in Retrying(
        stop=stop_after_attempt(3),
        wait=wait_fixed(0.5),
        retry=retry_if_exception(lambda e: isinstance(e, GitError) and bool(_TRANSIENT.search(e.stderr or str(e)))),
        reraise=True,
    ):
        with attempt:
            run_git(memory_dir, *args)


def _push(memory_dir: Path, status: RepoStatus) -> SyncResult:
    where = str(memory_dir)
    counts = run_git(memory_dir, "rev-list", "--left-right", "--count", "HEAD...@{u}", check=False)
    if counts.returncode != 0:
        return SyncResult("clean", "Memory repo is clean and has no pending commits to push.", where, False, status.revision)
    ahead = int(counts.stdout.split()[0])
    if ahead <= 0:
        return SyncResult("clean", "Memory repo is clean and has no pending commits to push.", where, False, status.revision)
    try:
        _network(memory_dir, "push", "-u", "origin", "HEAD")
        return SyncResult("pushed", f"Pushed {ahead} pending memory commit(s).", where, False, status.revision)
    except GitError as exc:
        if not _NON_FAST_FORWARD.search(exc.stderr or str(exc)):
            return SyncResult("push_failed", str(exc), where, False, status.revision)
    try:
        _network(memory_dir, "pull", "--rebase")
        _network(memory_dir, "push", "-u", "origin", "HEAD")
    except GitError as exc:
        after = repo_status(memory_dir)
        if after.in_conflict:
            return SyncResult("conflict", conflict_summary(after), where, False, after.revision)
        return SyncResult("push_failed", str(exc), where, False, after.revision)
    return SyncResult("pushed", f"Rebased and pushed {ahead} pending memory commit(s).", where, False, status.revision)

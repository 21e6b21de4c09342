"""What a reflection's merge-back outcome means for the agent (D2, D3, R2, S12).

``orchestrator.memfs.merge`` returns D2 outcomes and nothing else; this module, the caller, turns
them into the store record, events and reminders:

* every launch ends with exactly one ``reflection.outcome`` event, when it settles (``merged``,
  ``resolved``, ``no_changes``, ``kept`` or ``failed``); ``pending`` is not settled: it gets a
  ``reflection.pending`` event and no reminder, and after 3 turn ends still pending S12's
  dirty-parent reminder;
* a kept branch gets S12's reminder (reason text and files) once; a failed run also a
  ``reflection.failed`` event (the CLI shows ``⚠ reflection failed: …``);
* commits a git outside reverie's wrapper made while the merge held the lock (folded in:
  :attr:`MergeOutcome.bypassed`) get a ``reflection.bypassed`` event before the outcome's;
* :class:`BranchRetrier` retries pending branches at every turn end and at start-up, and kept
  branches whose ``HEAD`` has moved since (a real conflict stays kept; a reverted edit merges).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import replace
from functools import partial
from pathlib import Path

from orchestrator.agent.reminders import reflection_kept_reminder
from orchestrator.base import blocking
from orchestrator.base.events import Event
from orchestrator.base.limits import LimitReached
from orchestrator.base.subagent_events import (
    ReflectionBypassed,
    ReflectionFailed,
    ReflectionKept,
    ReflectionMerged,
    ReflectionOutcome,
    ReflectionPending,
)
from orchestrator.memfs.merge import REASON_DIRTY, MergeOutcome, merge_branch
from orchestrator.memfs.repo import head_revision
from orchestrator.memfs.resolution import Resolver
from orchestrator.store import ReflectionRecord, Store

__all__ = [
    "PENDING_REMINDER_TURNS",
    "BranchRetrier",
    "Emit",
    "kept_reminder_text",
    "record_status",
    "settle",
    "settle_interrupted",
]

PENDING_REMINDER_TURNS = 3
Emit = Callable[[Event, str | None], Awaitable[None]]
"""Publishes an event for a conversation (``orchestrator.base.events.Publisher``)."""


def kept_reminder_text(record: ReflectionRecord, reason: str | None = None) -> str:
    """S12 "MEMORY REFLECTION KEPT" for a record (its commits, reason and files)."""
    return reflection_kept_reminder(
        n=len(record.commits),
        reason=reason or record.reason or REASON_DIRTY,
        branch=record.branch,
        files=record.files,
        id=record.id,
    )


def record_status(outcome: MergeOutcome, error: str | None) -> str:
    """The store status for an outcome of a run that ended with ``error`` (None when it succeeded)."""
    if outcome.status == "kept":
        return f"kept_{outcome.reason_code or 'conflict'}"
    if outcome.status == "no_changes" and error is not None:
        return "failed"
    return outcome.status


def _error_of(outcome: MergeOutcome, error: str | None) -> str | None:
    if outcome.status == "failed":
        return error or (outcome.errors[0] if outcome.errors else "merge-back failed")
    return error


async def settle(
    store: Store,
    emit: Emit,
    record: ReflectionRecord,
    outcome: MergeOutcome,
    error: str | None = None,
    *,
    first: bool = True,
    limit: LimitReached | None = None,
) -> ReflectionRecord:
    """Record ``outcome`` for ``record`` and tell the conversation; returns the saved record.

    ``first``: the launch has not settled before (so this may be its one ``reflection.outcome``);
    a retry of a kept branch that merges later records the merge without a second outcome.
    ``limit``: the run stopped at one of its limits (B1): its status and outcome are ``limit``, not
    a failure, and commits it made stay on its branch (kept, never retried, named in S12's reminder).
    """
    if limit is not None:
        return await _settle_limit(store, emit, record, outcome, limit)
    status = record_status(outcome, error)
    failure = _error_of(outcome, error)
    conversation_id = record.conversation_id
    updated = replace(
        record,
        status=status,
        reason=outcome.reason or (failure if status == "failed" else None),
        reason_code=outcome.reason_code,
        error=failure,
        commits=outcome.commits or record.commits,
        files=outcome.files or record.files,
        retried=record.retried + outcome.retried,
        kept_head=outcome.new_head if outcome.status == "kept" else None,
        resolved_files=outcome.resolved_files or record.resolved_files,
    )
    await store.save_reflection(updated)
    if outcome.bypassed:
        await emit(ReflectionBypassed(record.id, record.branch, outcome.bypassed), conversation_id)
    if outcome.status in {"merged", "resolved"}:
        event: Event = ReflectionMerged(
            record.id, record.branch, outcome.commit_count, outcome.new_head or "", outcome=outcome.status
        )
        await emit(event, conversation_id)
    elif outcome.status == "pending":
        await emit(
            ReflectionPending(
                record.id, record.branch, outcome.commit_count, outcome.reason or "", outcome.reason_code or "",
                updated.pending_turns,
            ),
            conversation_id,
        )
    elif outcome.status == "kept":
        if conversation_id:
            await store.enqueue_reminder(
                conversation_id, f"reflection-kept:{record.id}", kept_reminder_text(updated), priority=60
            )
        await emit(
            ReflectionKept(
                record.id, record.branch, outcome.commit_count, outcome.reason or "", outcome.files,
                outcome.reason_code or "",
            ),
            conversation_id,
        )
    if failure is not None:
        await emit(ReflectionFailed(record.id, failure, record.branch, outcome.commit_count), conversation_id)
    if first and outcome.settled:
        await emit(
            ReflectionOutcome(
                record.id,
                record.branch,
                "kept" if outcome.status == "kept" else ("failed" if status == "failed" else outcome.status),
                outcome.commit_count,
                outcome.reason or "",
                outcome.reason_code or "",
                outcome.files,
                failure or "",
                updated.retried,
            ),
            conversation_id,
        )
    return updated


async def _settle_limit(
    store: Store, emit: Emit, record: ReflectionRecord, outcome: MergeOutcome, limit: LimitReached
) -> ReflectionRecord:
    """A run stopped at ``limit``: recorded ``limit``; its commits, if any, kept on its branch."""
    reason = str(limit)
    updated = replace(
        record,
        status="limit",
        reason=reason,
        reason_code="limit",
        error=None,
        commits=outcome.commits or record.commits,
        files=outcome.files or record.files,
        kept_head=outcome.new_head if outcome.status == "kept" else None,
    )
    await store.save_reflection(updated)
    conversation_id = record.conversation_id
    if outcome.status == "kept":
        if conversation_id:
            await store.enqueue_reminder(
                conversation_id, f"reflection-kept:{record.id}", kept_reminder_text(updated, reason), priority=60
            )
        await emit(
            ReflectionKept(record.id, record.branch, outcome.commit_count, reason, outcome.files, "limit"),
            conversation_id,
        )
    await emit(
        ReflectionOutcome(
            record.id, record.branch, "limit", outcome.commit_count, reason, limit.limit, outcome.files
        ),
        conversation_id,
    )
    return updated


async def settle_interrupted(store: Store, emit: Emit, record: ReflectionRecord, outcome: MergeOutcome) -> ReflectionRecord:
    """L2: a run its session's end cut short is ``interrupted``, never ``failed``: its commits, if
    any, stay on its branch (start-up recovery merges them), and a run that committed nothing is
    relaunched by the agent's next session. Its one outcome says so."""
    reason = "interrupted: the session ended first; the next session " + (
        "merges its commits" if outcome.commits else "relaunches it"
    )
    updated = replace(
        record,
        status="interrupted",
        reason=reason,
        reason_code="interrupted",
        error=None,
        commits=outcome.commits or record.commits,
        files=outcome.files or record.files,
    )
    await store.save_reflection(updated)
    await emit(
        ReflectionOutcome(record.id, record.branch, "interrupted", outcome.commit_count, reason, "interrupted", outcome.files),
        record.conversation_id,
    )
    return updated


class BranchRetrier:
    """Retries the agent's waiting branches (D2: pending at every turn end and start-up; kept on a
    conflict once ``HEAD`` has moved on)."""

    def __init__(
        self,
        *,
        store: Store,
        agent_id: str,
        memory_dir: Path,
        emit: Emit,
        resolver: Resolver | None = None,
    ) -> None:
        self.store = store
        self.agent_id = agent_id
        self.memory_dir = memory_dir
        self.emit = emit
        self.resolver = resolver

    async def candidates(self, head: str | None) -> list[ReflectionRecord]:
        return _retryable(await self.store.reflections(self.agent_id), head)

    async def retry(
        self, *, turn_end: bool = True, records: list[ReflectionRecord] | None = None
    ) -> list[ReflectionRecord]:
        """One retry round; returns the records as saved afterwards. ``records``: the agent's
        records as the caller just read them (``Store.reflections_and_state``)."""
        if records is None:
            records = await self.store.reflections(self.agent_id)
        if not any(r.retryable for r in records):
            return []  # nothing could be retried: no HEAD to read (a worker hop every turn end)
        head = await blocking.run_sync("git", partial(head_revision, self.memory_dir))
        done: list[ReflectionRecord] = []
        for record in _retryable(records, head):
            try:
                outcome = await merge_branch(self.memory_dir, record.branch, resolver=self.resolver)
            except ValueError:
                gone = replace(record, status="discarded", reason="the branch no longer exists")
                await self.store.save_reflection(gone)
                done.append(gone)
                continue
            was_waiting = record.waiting
            if outcome.status == "pending":
                turns = record.pending_turns + (1 if turn_end else 0)
                waiting = replace(record, status="pending", pending_turns=turns, reason=outcome.reason,
                                  reason_code=outcome.reason_code, retried=record.retried + outcome.retried,
                                  commits=outcome.commits or record.commits, files=outcome.files or record.files)
                await self.store.save_reflection(waiting)
                if turns == PENDING_REMINDER_TURNS and waiting.conversation_id:
                    await self.store.enqueue_reminder(
                        waiting.conversation_id,
                        f"reflection-pending:{record.id}",
                        kept_reminder_text(waiting, REASON_DIRTY),
                        priority=60,
                    )
                done.append(waiting)
                continue
            if outcome.status == "kept" and not was_waiting and outcome.reason_code == "conflict":
                # Still a real conflict with the newer HEAD: remember that HEAD, no second reminder.
                still = replace(record, kept_head=outcome.new_head, retried=record.retried + outcome.retried)
                await self.store.save_reflection(still)
                done.append(still)
                continue
            done.append(await settle(self.store, self.emit, record, outcome, first=was_waiting))
        return done


def _retryable(records: list[ReflectionRecord], head: str | None) -> list[ReflectionRecord]:
    return [
        r
        for r in records
        if r.waiting or (r.status == "kept_conflict" and head is not None and r.kept_head not in (None, head))
    ]

"""A reflection held for review (V1): its record and events when the run ends.

Under ``[reflection] merge = review`` a finished run's branch is neither merged nor retried: the
record says ``kept_review`` (``RETRYABLE_STATUSES`` leaves it out, so turn ends and start-up do not
touch it), ``reflection.review`` tells the conversation what it changes, and the launch's one
``reflection.outcome`` is ``review``. The decision comes later, from a person (``orchestrator.app.review``).
"""

from __future__ import annotations

from dataclasses import replace

from orchestrator.base.subagent_events import ReflectionAwaitingReview, ReflectionOutcome
from orchestrator.memfs.review import HeldBranch
from orchestrator.store import ReflectionRecord, Store
from subagents.reflection_merge import Emit

__all__ = ["REASON_REVIEW", "REVIEW_STATUS", "hold"]

REVIEW_STATUS = "kept_review"
REASON_REVIEW = "awaits review ([reflection] merge = review)"


async def hold(store: Store, emit: Emit, record: ReflectionRecord, held: HeldBranch) -> ReflectionRecord:
    """Record ``held`` as ``record``'s outcome and tell the conversation; returns the saved record."""
    saved = replace(
        record,
        status=REVIEW_STATUS,
        reason=REASON_REVIEW,
        reason_code="review",
        commits=held.commits,
        files=tuple(path for path, _, _ in held.files),
    )
    await store.save_reflection(saved)
    conversation_id = record.conversation_id
    await emit(
        ReflectionAwaitingReview(
            record.id, record.branch, len(held.commits), held.files, held.added, held.removed
        ),
        conversation_id,
    )
    await emit(
        ReflectionOutcome(
            record.id, record.branch, "review", len(held.commits), REASON_REVIEW, "review", saved.files
        ),
        conversation_id,
    )
    return saved

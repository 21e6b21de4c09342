"""What the background subagents publish: compaction's and reflection's events (``docs/events.md``).

They live apart from ``events`` so that a turn loads them only once a compaction or a reflection
starts, or the renderer first shows one: a chat's first request waits for neither (P1).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, ClassVar

from orchestrator.base.events import Event

__all__ = [
    "COMPACTION_ENDS",
    "CompactionCancelled",
    "CompactionDone",
    "CompactionFailed",
    "CompactionProgress",
    "CompactionStarted",
    "CompactionSuperseded",
    "ReflectionAwaitingReview",
    "ReflectionBypassed",
    "ReflectionDecided",
    "ReflectionFailed",
    "ReflectionHeld",
    "ReflectionKept",
    "ReflectionLaunched",
    "ReflectionMerged",
    "ReflectionMerging",
    "ReflectionOutcome",
    "ReflectionPending",
]


@dataclass(frozen=True)
class CompactionStarted(Event):
    """Compaction began on ``messages`` messages holding ``tokens_before`` tokens."""

    kind: ClassVar[str] = "compaction.start"
    mode: str
    messages: int
    tokens_before: int
    background: bool = False
    compaction_id: str = ""
    """Names this compaction in its one terminal event (``COMPACTION_ENDS``)."""


@dataclass(frozen=True)
class CompactionProgress(Event):
    """A step of a running compaction (the ladder's rungs); shown, not stored."""

    kind: ClassVar[str] = "compaction.progress"
    transient: ClassVar[bool] = True
    step: str


@dataclass(frozen=True)
class CompactionDone(Event):
    """Compaction evicted ``evicted`` messages and left ``tokens_after`` tokens in context."""

    kind: ClassVar[str] = "compaction.done"
    mode: str
    evicted: int
    tokens_before: int
    tokens_after: int
    summary_message_id: str = ""
    stats: dict[str, Any] = field(default_factory=dict)
    compaction_id: str = ""


@dataclass(frozen=True)
class CompactionFailed(Event):
    """No summary was made: with ``evicted`` > 0 the emergency eviction made room, with 0 the context
    is unchanged; the turn goes on either way."""

    kind: ClassVar[str] = "compaction.failed"
    error: str
    evicted: int = 0
    compaction_id: str = ""
    trigger: str = ""
    """``context_window_limit``, ``context_window_overflow`` or ``manual`` (empty from older runs)."""


@dataclass(frozen=True)
class CompactionCancelled(Event):
    """A started compaction stopped before it ended: its turn was interrupted, or the session closed
    while it ran or while its background summary waited to be applied. The context is unchanged."""

    kind: ClassVar[str] = "compaction.cancelled"
    compaction_id: str
    reason: str


@dataclass(frozen=True)
class CompactionSuperseded(Event):
    """A background preparation (C4) that will not be applied: the conversation moved past its
    snapshot, it would not bring the context under the trigger, or a compaction in the request
    replaced it. The context is unchanged by it."""

    kind: ClassVar[str] = "compaction.superseded"
    compaction_id: str
    reason: str


COMPACTION_ENDS = ("compaction.done", "compaction.failed", "compaction.cancelled", "compaction.superseded")
"""Every ``compaction.start`` is followed by exactly one of these with its ``compaction_id``."""


@dataclass(frozen=True)
class ReflectionLaunched(Event):
    """A reflection subagent started in its own worktree on ``branch``."""

    kind: ClassVar[str] = "reflection.launch"
    reflection_id: str
    branch: str
    trigger: str


@dataclass(frozen=True)
class ReflectionHeld(Event):
    """A reflection was due but not launched: the memory repository's main checkout is not clean
    (``reason_code`` ``dirty``: uncommitted changes, a few of them in ``paths``; ``conflict``: a
    rebase or merge stopped half-way). The trigger stays armed, so it launches at the first turn end
    after the checkout is clean. Published once per condition (``subagents.reflection``): a
    checkout left dirty would hold back every reflection, and the user is the one who can clean it."""

    kind: ClassVar[str] = "reflection.held"
    reason: str
    reason_code: str
    paths: tuple[str, ...] = ()


@dataclass(frozen=True)
class ReflectionMerging(Event):
    """A reflection's run ended and its branch is being merged back (its merge-back span starts);
    shown, not stored: the merge's outcome is."""

    kind: ClassVar[str] = "reflection.merging"
    transient: ClassVar[bool] = True
    reflection_id: str


@dataclass(frozen=True)
class ReflectionMerged(Event):
    """A reflection's commits reached the memory repository's main branch."""

    kind: ClassVar[str] = "reflection.merged"
    reflection_id: str
    branch: str
    commits: int
    revision: str
    outcome: str = "merged"
    """``merged`` or ``resolved`` (a resolver reconciled a conflict, D3)."""


@dataclass(frozen=True)
class ReflectionKept(Event):
    """A reflection's branch was kept unmerged for the user (``reverie reflections``); nothing is lost."""

    kind: ClassVar[str] = "reflection.kept"
    reflection_id: str
    branch: str
    commits: int
    reason: str
    files: tuple[str, ...] = ()
    reason_code: str = ""
    """D2: ``conflict``, ``invalid``, ``failed`` (``dirty`` only from older runs)."""


@dataclass(frozen=True)
class ReflectionPending(Event):
    """D2: the branch could not be fast-forwarded yet; it is retried at every turn end and start-up."""

    kind: ClassVar[str] = "reflection.pending"
    reflection_id: str
    branch: str
    commits: int
    reason: str
    reason_code: str
    turns: int = 0


@dataclass(frozen=True)
class ReflectionFailed(Event):
    """A reflection run or its merge failed; the CLI shows ``⚠ reflection failed: <error>``."""

    kind: ClassVar[str] = "reflection.failed"
    reflection_id: str
    error: str
    branch: str = ""
    commits: int = 0


@dataclass(frozen=True)
class ReflectionBypassed(Event):
    """``HEAD`` moved while a reflection's merge-back held the repository lock, so ``commits`` were
    made by a git that skipped reverie's wrapper (``/usr/bin/git`` called directly: no lock, no
    hook). Nothing is lost: the branch was rebased onto them (folded in); the event says that
    something outside reverie writes this memory, which is worth knowing."""

    kind: ClassVar[str] = "reflection.bypassed"
    reflection_id: str
    branch: str
    commits: tuple[str, ...]


@dataclass(frozen=True)
class ReflectionOutcome(Event):
    """Exactly one per launch, when it settles (D2): ``merged``, ``resolved``, ``no_changes``,
    ``kept`` (with ``reason_code``), ``review`` (held for a person, V1), ``limit`` (B1),
    ``interrupted`` (its session ended first; the next one takes it up, L2) or ``failed`` (with ``error``)."""

    kind: ClassVar[str] = "reflection.outcome"
    reflection_id: str
    branch: str
    outcome: str
    commits: int = 0
    reason: str = ""
    reason_code: str = ""
    files: tuple[str, ...] = ()
    error: str = ""
    retried: int = 0


@dataclass(frozen=True)
class ReflectionAwaitingReview(Event):
    """V1: under ``[reflection] merge = review`` the run's branch is held for a person, ready to merge;
    ``files`` are ``[path, added, removed]`` since the revision the run started from."""

    kind: ClassVar[str] = "reflection.review"
    reflection_id: str
    branch: str
    commits: int
    files: tuple[tuple[str, int, int], ...] = ()
    added: int = 0
    removed: int = 0


@dataclass(frozen=True)
class ReflectionDecided(Event):
    """V1: a person merged or discarded a reflection branch; who, why, and what came of it
    (``outcome``: merge-back's for a merge, ``discarded`` for a discard)."""

    kind: ClassVar[str] = "reflection.decided"
    reflection_id: str
    branch: str
    decision: str
    by: str
    why: str = ""
    outcome: str = ""
    revision: str = ""
    commits: int = 0

"""The values the store hands out: agents, conversations, stored messages, prompt rows, reminders,
events, turns and search hits. All frozen; JSON columns come back as plain dicts."""

from __future__ import annotations

import sqlite3
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, Literal

from orchestrator.base.errors import ReverieError
from orchestrator.models.types import Message

__all__ = [
    "Agent",
    "Conversation",
    "ConversationSummary",
    "Event",
    "PendingReminder",
    "PromptRecord",
    "SearchHit",
    "StoreDamaged",
    "StoreError",
    "StoredMessage",
    "Turn",
    "TurnStatus",
    "format_time",
    "utc_now",
]

TurnStatus = Literal["running", "end_turn", "error", "interrupted", "max_steps", "cancelled", "limit"]


class StoreError(ReverieError):
    """A request the store cannot honour (unknown conversation, a message id not in context, ...)."""


class StoreDamaged(StoreError, sqlite3.DatabaseError):
    """SQLite refused a statement mid-query (a damaged or unreadable store file, a full disk): its
    one line names the store's file and SQLite's words. Still a ``sqlite3.DatabaseError``, so code
    that handles the driver's errors keeps doing so; to the CLI it is a ``ReverieError`` like any
    other (the store translates at its seam, ``store.worker``)."""


def format_time(moment: datetime) -> str:
    """ISO-8601 UTC with millisecond precision and a ``Z`` (T5), e.g. ``2026-01-01T00:00:00.000Z``.

    One fixed width, so stored times compare correctly as strings.
    """
    return moment.astimezone(UTC).isoformat(timespec="milliseconds")[:-6] + "Z"  # "+00:00" -> "Z"


def utc_now() -> str:
    """``format_time`` of now (without its ``astimezone``: the moment is UTC already)."""
    return datetime.now(UTC).isoformat(timespec="milliseconds")[:-6] + "Z"


@dataclass(frozen=True)
class Agent:
    """An agent as stored; ``settings`` holds what it overrides of the configuration."""

    id: str
    name: str
    created_at: str
    settings: Mapping[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class ConversationSummary:
    """What a conversation list shows: the conversation, its first user message, how many messages
    it holds and when the newest was written (``None`` for an empty one)."""

    conversation: Conversation
    first_message: str | None
    messages: int
    last_activity: str | None


@dataclass(frozen=True)
class Conversation:
    """One conversation of an agent; a ``hidden`` one is left out of listings and search unless asked for."""

    id: str
    agent_id: str
    created_at: str
    title: str | None = None
    hidden: bool = False


@dataclass(frozen=True)
class StoredMessage:
    """A message as persisted: ``seq`` orders the whole store, ``id`` is stable across compactions."""

    id: str
    seq: int
    conversation_id: str
    message: Message
    metadata: Mapping[str, Any]
    created_at: str
    turn_id: str | None


@dataclass(frozen=True)
class PromptRecord:
    """The compiled system prompt of one conversation (TURN-2.6).

    ``memfs_revision`` and ``core_memory`` are what the model was last *told* (through ``content`` or
    a ``<memory_update>`` message), as TURN-2.6 defines them; ``compiled_revision`` is the revision
    ``content`` itself was compiled at, kept so a reader can tell the two apart.
    """

    conversation_id: str
    agent_id: str
    content: str
    core_memory: str
    compiled_at: str
    raw_system_hash: str
    memfs_revision: str | None = None
    memory_format: str | None = None
    first_sent_at: str | None = None
    compiled_revision: str | None = None


@dataclass(frozen=True)
class PendingReminder:
    """A reminder waiting in the queue for a turn's first request."""

    key: str
    text: str
    priority: int
    once: bool
    enqueued_at: str


@dataclass(frozen=True)
class Event:
    """One entry of the event log (S8); ``payload`` is the kind-specific JSON object."""

    id: int
    at: str
    kind: str
    agent_id: str | None
    conversation_id: str | None
    payload: Mapping[str, Any]


@dataclass(frozen=True)
class Turn:
    """One turn as stored: ``ended_at`` and the final status are set when it closes."""

    id: str
    conversation_id: str
    started_at: str
    ended_at: str | None
    status: TurnStatus
    error: str | None


@dataclass(frozen=True)
class SearchHit:
    """One ``conversation_search`` result (COMPACTION-8.5).

    ``fields`` is the projected message (``id``, ``date``, ``message_type`` and the type's own fields);
    ``as_dict`` adds ``message_id``, ``created_at``, ``agent_id`` and ``conversation_id`` as the result
    shape requires. ``seq`` and ``score`` (BM25, lower is better; 0 for a substring-only match) are for
    callers that want to page around a hit; they are not part of the JSON shape.
    """

    message_id: str
    message_type: str
    created_at: str
    agent_id: str | None
    conversation_id: str | None
    seq: int
    score: float
    fields: Mapping[str, Any]

    def as_dict(self) -> dict[str, Any]:
        result = dict(self.fields)
        result["message_id"] = self.message_id
        result["created_at"] = self.created_at
        result["agent_id"] = self.agent_id
        result["conversation_id"] = self.conversation_id
        return result

"""The conversation store: agents, conversations, the durable transcript and the in-context list, the
compiled system prompt per conversation, reminder state, turns, events and transcript search, in one
SQLite file (WAL, busy timeout, foreign keys), each connection pinned to one of a few shared lane
threads (D8, relaxing S26; see ``worker``). Nothing here blocks the event loop; it runs on
trio and asyncio. One module per concept behind the ``Store`` facade: ``conversations``,
``transcript`` (with the in-context cache), ``prompts``, ``reminder_queue``, ``events``, ``turns``,
``search``, ``reflections``; ``jobs`` holds what they share.

The turn loop calls it through ``turn_jobs``'s composites (``open_turn``, ``close_turn``); the
sequence of calls of one turn (TURN-1.2) is in docs/architecture.md, "The store's calls in one
turn". A process killed mid-turn leaves its turn ``running``; the next ``Store.open`` marks it
``interrupted``."""

from orchestrator.store.records import (
    Agent,
    Conversation,
    ConversationSummary,
    Event,
    PendingReminder,
    PromptRecord,
    SearchHit,
    StoredMessage,
    StoreError,
    Turn,
    TurnStatus,
    format_time,
    utc_now,
)
from orchestrator.store.reflections import ReflectionRecord, ReflectionState
from orchestrator.store.reminder_queue import reminder_message
from orchestrator.store.store import LIKE_SCAN_MESSAGES, REMINDER_QUEUE_LIMIT, Store
from orchestrator.store.turn_jobs import OpenedTurn, SyncReminder, new_turn_id

__all__ = [
    "LIKE_SCAN_MESSAGES",
    "REMINDER_QUEUE_LIMIT",
    "Agent",
    "Conversation",
    "ConversationSummary",
    "Event",
    "OpenedTurn",
    "PendingReminder",
    "PromptRecord",
    "ReflectionRecord",
    "ReflectionState",
    "SearchHit",
    "Store",
    "StoreError",
    "StoredMessage",
    "SyncReminder",
    "Turn",
    "TurnStatus",
    "format_time",
    "new_turn_id",
    "reminder_message",
    "utc_now",
]

"""A finished run's store, read as it was left: the rows a task's report shows (conversations,
turns, messages, what is still in context, reflections), read through one read-only connection
(``store.worker.read_only``) and handed back as plain tuples, so the report (``batch.report_task``)
shapes them without touching SQLite. Never writes; tables an older store lacks read as empty.
"""

from __future__ import annotations

import sqlite3
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from orchestrator.store.worker import read_only

__all__ = ["FinishedStore", "read_finished", "read_reflection_rows"]


@dataclass(frozen=True)
class FinishedStore:
    """What a report reads of a store. ``messages`` are ``(seq, id, conversation_id, role, kind,
    content, tool_calls, tool_call_id, name, metadata, created_at, turn_id)`` in ``seq`` order;
    ``turns`` maps a turn id to ``(status, error)``; ``has_messages`` is False for a store without a
    messages table."""

    has_messages: bool
    in_context: frozenset[str]
    conversations: tuple[tuple[str, str | None, int], ...]
    turns: dict[str, tuple[str, str | None]]
    messages: tuple[tuple[Any, ...], ...]


def _tables(conn: sqlite3.Connection) -> set[str]:
    return {row[0] for row in conn.execute("SELECT name FROM sqlite_master WHERE type IN ('table', 'view')")}


def _read(conn: sqlite3.Connection) -> FinishedStore:
    tables = _tables(conn)
    if "messages" not in tables:
        return FinishedStore(False, frozenset(), (), {}, ())
    in_context = (
        frozenset(row[0] for row in conn.execute("SELECT message_id FROM in_context")) if "in_context" in tables else frozenset()
    )
    conversations = tuple(conn.execute("SELECT id, agent_id, hidden FROM conversations ORDER BY created_at, id"))
    turns = {row[0]: (row[1], row[2]) for row in conn.execute("SELECT id, status, error FROM turns")} if "turns" in tables else {}
    messages = tuple(
        conn.execute(
            "SELECT seq, id, conversation_id, role, kind, content, tool_calls, tool_call_id, name, metadata, "
            "created_at, turn_id FROM messages ORDER BY seq"
        )
    )
    return FinishedStore(True, in_context, conversations, turns, messages)


def read_finished(store: Path) -> FinishedStore:
    """The report's rows of ``store`` (blocking). ``StoreDamaged`` when it cannot be read."""
    return read_only(store, _read)


def _reflections(conn: sqlite3.Connection) -> tuple[tuple[Any, ...], ...]:
    if "reflections" not in _tables(conn):
        return ()
    return tuple(
        conn.execute("SELECT id, trigger, status, reason, branch, commits, files FROM reflections ORDER BY created_at")
    )


def read_reflection_rows(store: Path) -> tuple[tuple[Any, ...], ...]:
    """``(id, trigger, status, reason, branch, commits, files)`` of each reflection the store
    recorded, oldest first (blocking); empty for a store without them. ``StoreDamaged`` when it
    cannot be read."""
    return read_only(store, _reflections)

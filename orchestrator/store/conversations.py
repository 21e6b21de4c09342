"""Agents and their conversations: who exists, which conversations they have, titles and hidden
flags, and which conversation was active last."""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Mapping
from typing import Any, cast

from orchestrator.store.jobs import StoreJobs, dumps, new_id, transaction
from orchestrator.store.records import Agent, Conversation, ConversationSummary, StoreError, utc_now

__all__ = ["Conversations", "last_message_time"]


def _conversation(row: tuple[Any, ...]) -> Conversation:
    return Conversation(id=row[0], agent_id=row[1], created_at=row[2], title=row[3], hidden=bool(row[4]))


def _agent(row: tuple[Any, ...]) -> Agent:
    return Agent(id=row[0], name=row[1], created_at=row[2], settings=json.loads(row[3]))


def last_message_time(conn: sqlite3.Connection, agent_id: str, exclude_conversation: str | None = None) -> str | None:
    """When the agent last recorded a message: each conversation's newest message by ``seq`` (one
    index probe per conversation), not a scan of every message the agent ever stored, which a
    turn re-arming agent-info paid once per compaction (bench/soak.py: ~11% of a 4,000-turn
    session's samples). Messages are appended in ``created_at`` order, so the two agree."""
    row = conn.execute(
        "SELECT MAX((SELECT m.created_at FROM messages m WHERE m.conversation_id = c.id "
        "ORDER BY m.seq DESC LIMIT 1)) FROM conversations c WHERE c.agent_id = ? AND (? IS NULL OR c.id != ?)",
        (agent_id, exclude_conversation, exclude_conversation),
    ).fetchone()
    return cast("str | None", row[0])


class Conversations(StoreJobs):
    """Mixed into ``Store``: the ``agents`` and ``conversations`` tables."""

    async def ensure_agent(
        self, agent_id: str, *, name: str | None = None, settings: Mapping[str, Any] | None = None
    ) -> Agent:
        """Create the agent if it does not exist (name defaults to the id); an existing agent is
        returned unchanged (use ``update_agent_settings`` to change it)."""

        def job(conn: sqlite3.Connection) -> Agent:
            with transaction(conn):
                conn.execute(
                    "INSERT OR IGNORE INTO agents(id, name, created_at, settings) VALUES (?, ?, ?, ?)",
                    (agent_id, name or agent_id, utc_now(), dumps(dict(settings or {}))),
                )
                row = conn.execute(
                    "SELECT id, name, created_at, settings FROM agents WHERE id = ?", (agent_id,)
                ).fetchone()
            return _agent(row)

        return await self._run(job)

    async def get_agent(self, agent_id: str) -> Agent | None:
        def job(conn: sqlite3.Connection) -> Agent | None:
            row = conn.execute(
                "SELECT id, name, created_at, settings FROM agents WHERE id = ?", (agent_id,)
            ).fetchone()
            return _agent(row) if row else None

        return await self._run(job)

    async def list_agents(self) -> list[Agent]:
        def job(conn: sqlite3.Connection) -> list[Agent]:
            rows = conn.execute(
                "SELECT id, name, created_at, settings FROM agents ORDER BY created_at, id"
            ).fetchall()
            return [_agent(r) for r in rows]

        return await self._run(job)

    async def update_agent(
        self, agent_id: str, *, name: str | None = None, settings: Mapping[str, Any] | None = None
    ) -> Agent:
        """Rename and/or merge ``settings`` into the agent's settings (a key set to None is removed)."""

        def job(conn: sqlite3.Connection) -> Agent:
            with transaction(conn):
                row = conn.execute(
                    "SELECT id, name, created_at, settings FROM agents WHERE id = ?", (agent_id,)
                ).fetchone()
                if row is None:
                    raise StoreError(f"unknown agent {agent_id!r}")
                merged = dict(json.loads(row[3]))
                for key, value in (settings or {}).items():
                    if value is None:
                        merged.pop(key, None)
                    else:
                        merged[key] = value
                conn.execute(
                    "UPDATE agents SET name = ?, settings = ? WHERE id = ?",
                    (name or row[1], dumps(merged), agent_id),
                )
            return Agent(id=row[0], name=name or row[1], created_at=row[2], settings=merged)

        return await self._run(job)

    async def create_conversation(
        self,
        agent_id: str,
        *,
        title: str | None = None,
        hidden: bool = False,
        conversation_id: str | None = None,
    ) -> Conversation:
        def job(conn: sqlite3.Connection) -> Conversation:
            if conn.execute("SELECT 1 FROM agents WHERE id = ?", (agent_id,)).fetchone() is None:
                raise StoreError(f"unknown agent {agent_id!r}")
            conv = Conversation(
                id=conversation_id or new_id("conv"),
                agent_id=agent_id,
                created_at=utc_now(),
                title=title,
                hidden=hidden,
            )
            try:
                with transaction(conn):
                    conn.execute(
                        "INSERT INTO conversations(id, agent_id, created_at, title, hidden) VALUES (?, ?, ?, ?, ?)",
                        (conv.id, agent_id, conv.created_at, title, int(hidden)),
                    )
            except sqlite3.IntegrityError:
                raise StoreError(f"conversation {conv.id!r} already exists") from None
            return conv

        return await self._run(job)

    async def get_conversation(self, conversation_id: str) -> Conversation | None:
        def job(conn: sqlite3.Connection) -> Conversation | None:
            row = conn.execute(
                "SELECT id, agent_id, created_at, title, hidden FROM conversations WHERE id = ?",
                (conversation_id,),
            ).fetchone()
            return _conversation(row) if row else None

        return await self._run(job)

    async def latest_conversation(
        self, agent_id: str, *, include_hidden: bool = False
    ) -> Conversation | None:
        """The agent's most recently active conversation (newest message, else newest created)."""

        def job(conn: sqlite3.Connection) -> Conversation | None:
            row = conn.execute(
                "SELECT c.id, c.agent_id, c.created_at, c.title, c.hidden FROM conversations c "
                "WHERE c.agent_id = ? AND (? OR c.hidden = 0) "
                "ORDER BY COALESCE((SELECT MAX(seq) FROM messages m WHERE m.conversation_id = c.id), 0) DESC, "
                "c.created_at DESC, c.rowid DESC LIMIT 1",
                (agent_id, include_hidden),
            ).fetchone()
            return _conversation(row) if row else None

        return await self._run(job)

    async def list_conversations(
        self, agent_id: str | None = None, *, include_hidden: bool = True
    ) -> list[Conversation]:
        def job(conn: sqlite3.Connection) -> list[Conversation]:
            rows = conn.execute(
                "SELECT id, agent_id, created_at, title, hidden FROM conversations "
                "WHERE (? IS NULL OR agent_id = ?) AND (? OR hidden = 0) ORDER BY created_at, rowid",
                (agent_id, agent_id, include_hidden),
            ).fetchall()
            return [_conversation(r) for r in rows]

        return await self._run(job)

    async def conversation_summaries(self, agent_id: str, *, include_hidden: bool = False) -> list[ConversationSummary]:
        """The agent's conversations, oldest first, each with its first user message, its count of
        messages (the user's, the model's and tool results; not reminders or summaries) and its last
        activity, in one query (``reverie history --list``, ``/conversations``)."""

        def job(conn: sqlite3.Connection) -> list[ConversationSummary]:
            rows = conn.execute(
                "SELECT c.id, c.agent_id, c.created_at, c.title, c.hidden, "
                "(SELECT content FROM messages m WHERE m.conversation_id = c.id AND m.role = 'user' "
                " AND m.kind = 'message' ORDER BY seq LIMIT 1), "
                "(SELECT COUNT(*) FROM messages m WHERE m.conversation_id = c.id AND m.kind = 'message'), "
                "(SELECT MAX(created_at) FROM messages m WHERE m.conversation_id = c.id) "
                "FROM conversations c WHERE c.agent_id = ? AND (? OR c.hidden = 0) ORDER BY c.created_at, c.rowid",
                (agent_id, include_hidden),
            ).fetchall()
            return [ConversationSummary(_conversation(r[:5]), r[5], int(r[6]), r[7]) for r in rows]

        return await self._run(job)

    async def conversation_by_prefix(self, agent_id: str, prefix: str) -> list[Conversation]:
        """The agent's conversations whose id starts with ``prefix`` (an abbreviated id)."""

        def job(conn: sqlite3.Connection) -> list[Conversation]:
            rows = conn.execute(
                "SELECT id, agent_id, created_at, title, hidden FROM conversations "
                "WHERE agent_id = ? AND substr(id, 1, ?) = ? ORDER BY created_at, rowid",
                (agent_id, len(prefix), prefix),
            ).fetchall()
            return [_conversation(r) for r in rows]

        return await self._run(job)

    async def set_conversation_title(self, conversation_id: str, title: str | None) -> None:
        def job(conn: sqlite3.Connection) -> None:
            with transaction(conn):
                cur = conn.execute(
                    "UPDATE conversations SET title = ? WHERE id = ?", (title, conversation_id)
                )
                if cur.rowcount == 0:
                    raise StoreError(f"unknown conversation {conversation_id!r}")

        await self._run(job)

    async def last_message_at(self, agent_id: str, *, exclude_conversation: str | None = None) -> str | None:
        """When the agent last recorded a message (for the agent-info reminder's "Last message")."""

        return await self._run(lambda conn: last_message_time(conn, agent_id, exclude_conversation))

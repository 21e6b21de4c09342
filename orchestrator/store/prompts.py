"""The compiled system prompt row per conversation (turn-loop.md 2.6): what was compiled, from which
memory revision, and whether a provider request has carried it yet (``first_sent_at``)."""

from __future__ import annotations

import sqlite3

from orchestrator.store.jobs import StoreJobs, transaction
from orchestrator.store.records import PromptRecord, utc_now

__all__ = ["Prompts", "write_prompt"]


def write_prompt(conn: sqlite3.Connection, r: PromptRecord) -> None:
    """Insert or replace the row; the caller owns the transaction."""
    conn.execute(
        "INSERT OR REPLACE INTO prompts(conversation_id, agent_id, content, core_memory, compiled_at, raw_system_hash, "
        "memfs_revision, memory_format, first_sent_at, compiled_revision) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
        (
            r.conversation_id,
            r.agent_id,
            r.content,
            r.core_memory,
            r.compiled_at,
            r.raw_system_hash,
            r.memfs_revision,
            r.memory_format,
            r.first_sent_at,
            r.compiled_revision,
        ),
    )


class Prompts(StoreJobs):
    """Mixed into ``Store``: the ``prompts`` table."""

    async def get_prompt(self, conversation_id: str) -> PromptRecord | None:
        def job(conn: sqlite3.Connection) -> PromptRecord | None:
            row = conn.execute(
                "SELECT conversation_id, agent_id, content, core_memory, compiled_at, raw_system_hash, memfs_revision, "
                "memory_format, first_sent_at, compiled_revision FROM prompts WHERE conversation_id = ?",
                (conversation_id,),
            ).fetchone()
            return PromptRecord(*row) if row else None

        return await self._run(job)

    async def set_prompt(self, record: PromptRecord) -> None:
        """Replace the conversation's prompt row with ``record`` as given (``first_sent_at`` included)."""

        def job(conn: sqlite3.Connection) -> None:
            with transaction(conn):
                write_prompt(conn, record)

        await self._run(job)

    async def mark_prompt_sent(self, conversation_id: str) -> None:
        """Set ``first_sent_at`` if it is still null: a provider request carried this content."""

        def job(conn: sqlite3.Connection) -> None:
            with transaction(conn):
                conn.execute(
                    "UPDATE prompts SET first_sent_at = ? WHERE conversation_id = ? AND first_sent_at IS NULL",
                    (utc_now(), conversation_id),
                )

        await self._run(job)

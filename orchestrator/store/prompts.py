"""The compiled system prompt row per conversation (TURN-2.6): what was compiled, from which
memory revision, and whether a provider request has carried it yet (``first_sent_at``)."""

from __future__ import annotations

import sqlite3
from dataclasses import replace

from orchestrator.store.jobs import StoreJobs
from orchestrator.store.records import PromptRecord, utc_now

__all__ = ["Prompts", "read_prompt", "write_prompt"]


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


def read_prompt(conn: sqlite3.Connection, conversation_id: str) -> PromptRecord | None:
    row = conn.execute(
        "SELECT conversation_id, agent_id, content, core_memory, compiled_at, raw_system_hash, memfs_revision, "
        "memory_format, first_sent_at, compiled_revision FROM prompts WHERE conversation_id = ?",
        (conversation_id,),
    ).fetchone()
    return PromptRecord(*row) if row else None


class Prompts(StoreJobs):
    """Mixed into ``Store``: the ``prompts`` table."""

    async def get_prompt(self, conversation_id: str) -> PromptRecord | None:
        """The row (from memory while a turn of the conversation is open here, see ``jobs.TurnView``)."""
        view = self._views.get(conversation_id)
        if view is not None and view.prompt_known:
            return view.prompt
        record = await self._run(lambda conn: read_prompt(conn, conversation_id))
        view = self._views.get(conversation_id)
        if view is not None and not view.prompt_known:
            view.prompt, view.prompt_known = record, True
        return record

    async def set_prompt(self, record: PromptRecord) -> None:
        """Replace the conversation's prompt row with ``record`` as given (``first_sent_at`` included)."""
        await self._write(lambda conn: write_prompt(conn, record))
        view = self._views.get(record.conversation_id)
        if view is not None:
            view.prompt, view.prompt_known = record, True

    async def mark_prompt_sent(self, conversation_id: str) -> None:
        """Set ``first_sent_at`` if it is still null: a provider request carried this content. No job
        at all when an open turn's view already shows it set (the update would change nothing)."""
        view = self._views.get(conversation_id)
        if view is not None and view.prompt_known and (view.prompt is None or view.prompt.first_sent_at is not None):
            return
        at = utc_now()

        def job(conn: sqlite3.Connection) -> None:
            conn.execute(
                "UPDATE prompts SET first_sent_at = ? WHERE conversation_id = ? AND first_sent_at IS NULL",
                (at, conversation_id),
            )

        await self._write(job)
        view = self._views.get(conversation_id)
        if view is not None and view.prompt_known and view.prompt is not None and view.prompt.first_sent_at is None:
            view.prompt = replace(view.prompt, first_sent_at=at)

"""The durable transcript and the in-context list: every message ever appended (with its search
projection, COMPACTION-8.1) and the ordered subset currently sent to the model."""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Mapping, Sequence
from typing import Any, cast

from orchestrator.models.types import Message, ToolCall
from orchestrator.store.jobs import StoreJobs, dumps, fault, new_id
from orchestrator.store.projection import project
from orchestrator.store.prompts import write_prompt
from orchestrator.store.records import PromptRecord, StoredMessage, StoreError, utc_now
from orchestrator.store.schema import PARTS_PER_MESSAGE

__all__ = ["MSG_COLUMNS", "ContextCache", "Transcript", "insert_messages", "read_in_context", "row_to_message"]

MSG_COLUMNS = "m.id, m.seq, m.conversation_id, m.role, m.kind, m.content, m.tool_calls, m.tool_call_id, m.name, m.metadata, m.created_at, m.turn_id"


def row_to_message(row: sqlite3.Row | tuple[Any, ...]) -> StoredMessage:
    (mid, seq, conv, role, kind, content, calls, call_id, name, metadata, created_at, turn_id) = row
    tool_calls = tuple(
        ToolCall(id=c["id"], name=c["name"], arguments=c["arguments"]) for c in json.loads(calls)
    )
    message = Message(
        role=role, content=content, tool_calls=tool_calls, tool_call_id=call_id, name=name, kind=kind
    )
    return StoredMessage(
        id=mid,
        seq=seq,
        conversation_id=conv,
        message=message,
        metadata=json.loads(metadata),
        created_at=created_at,
        turn_id=turn_id,
    )


def insert_messages(
    conn: sqlite3.Connection,
    conversation_id: str,
    drafts: Sequence[tuple[Message, dict[str, Any]]],
    turn_id: str | None,
    *,
    in_context: bool = True,
) -> list[StoredMessage]:
    """Insert ``drafts`` (message, metadata) with their search rows, appended to the in-context list
    unless ``in_context`` is false; the caller owns the transaction."""
    conv = conn.execute("SELECT agent_id FROM conversations WHERE id = ?", (conversation_id,)).fetchone()
    if conv is None:
        raise StoreError(f"unknown conversation {conversation_id!r}")
    position = conn.execute(
        "SELECT COALESCE(MAX(position), -1) FROM in_context WHERE conversation_id = ?", (conversation_id,)
    ).fetchone()[0]
    stored: list[StoredMessage] = []
    for message, metadata in drafts:
        mid = new_id("msg")
        now = utc_now()
        calls = [{"id": c.id, "name": c.name, "arguments": c.arguments} for c in message.tool_calls]
        cur = conn.execute(
            "INSERT INTO messages(id, conversation_id, role, kind, content, tool_calls, tool_call_id, name, "
            "metadata, created_at, turn_id) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
            (
                mid,
                conversation_id,
                message.role,
                message.kind,
                message.content,
                dumps(calls),
                message.tool_call_id,
                message.name,
                dumps(metadata),
                now,
                turn_id,
            ),
        )
        seq = cast(int, cur.lastrowid)
        for part in project(mid, message, metadata, now, conv[0], conversation_id)[:PARTS_PER_MESSAGE]:
            conn.execute(
                "INSERT INTO search_fts(rowid, message_type, text, date) VALUES (?, ?, ?, ?)",
                (seq * PARTS_PER_MESSAGE + part.part, part.message_type, part.text, part.date),
            )
        fault("store.append.before_in_context")
        if in_context:
            position += 1
            conn.execute(
                "INSERT INTO in_context(conversation_id, position, message_id) VALUES (?, ?, ?)",
                (conversation_id, position, mid),
            )
        stored.append(StoredMessage(mid, seq, conversation_id, message, metadata, now, turn_id))
    return stored


class ContextCache:
    """The in-context lists this connection has read or written, so a turn does not decode its whole
    history from SQLite for every request. Valid while no *other* connection commits: SQLite's
    ``PRAGMA data_version`` changes exactly then (this connection's own commits do not change it, and
    they update the cache themselves, after the commit). Touched only inside jobs, i.e. in the
    connection's lane, one job at a time."""

    def __init__(self) -> None:
        self._version: int | None = None
        self._lists: dict[str, list[StoredMessage]] = {}

    def get(self, conn: sqlite3.Connection, conversation_id: str) -> list[StoredMessage] | None:
        version = conn.execute("PRAGMA data_version").fetchone()[0]
        if version != self._version:
            self._lists.clear()
            self._version = version
        found = self._lists.get(conversation_id)
        return list(found) if found is not None else None

    def put(self, conversation_id: str, messages: list[StoredMessage]) -> None:
        self._lists[conversation_id] = list(messages)

    def appended(self, conversation_id: str, messages: Sequence[StoredMessage]) -> None:
        """This connection committed ``messages`` at the end of the conversation's context."""
        found = self._lists.get(conversation_id)
        if found is not None:
            found.extend(messages)

    def forget(self, conversation_id: str) -> None:
        self._lists.pop(conversation_id, None)


def read_in_context(conn: sqlite3.Connection, cache: ContextCache, conversation_id: str) -> list[StoredMessage]:
    """The in-context list through the lane-side cache; runs in the connection's lane."""
    cached = cache.get(conn, conversation_id)
    if cached is not None:
        return cached
    rows = conn.execute(
        f"SELECT {MSG_COLUMNS} FROM in_context i JOIN messages m ON m.id = i.message_id "
        "WHERE i.conversation_id = ? ORDER BY i.position",
        (conversation_id,),
    ).fetchall()
    messages = [row_to_message(r) for r in rows]
    cache.put(conversation_id, messages)
    return messages


class Transcript(StoreJobs):
    """Mixed into ``Store``: the ``messages``, ``in_context`` and ``search_fts`` rows of a message."""

    _context: ContextCache

    async def append_message(
        self,
        conversation_id: str,
        message: Message,
        *,
        turn_id: str | None = None,
        metadata: Mapping[str, Any] | None = None,
        prompt: PromptRecord | None = None,
    ) -> StoredMessage:
        return (
            await self.append_messages(
                conversation_id, [message], turn_id=turn_id, metadata=metadata, prompt=prompt
            )
        )[0]

    async def append_messages(
        self,
        conversation_id: str,
        messages: Sequence[Message],
        *,
        turn_id: str | None = None,
        metadata: Mapping[str, Any] | None = None,
        prompt: PromptRecord | None = None,
    ) -> list[StoredMessage]:
        """Append to the durable transcript and the end of the in-context list, in one transaction.

        ``metadata`` is stored with each message (never sent to the model). ``prompt``, when given, is
        written in the same transaction: the row 4 path of TURN-2.6 appends its ``<memory_update>``
        and moves the prompt row together."""
        drafts = [(m, dict(metadata or {})) for m in messages]

        def job(conn: sqlite3.Connection) -> list[StoredMessage]:
            stored = insert_messages(conn, conversation_id, drafts, turn_id)
            if prompt is not None:
                write_prompt(conn, prompt)
            return stored

        stored = await self._write(job, after=lambda done: self._context.appended(conversation_id, done))
        self._viewed_append(conversation_id, stored)
        view = self._views.get(conversation_id)
        if view is not None and prompt is not None:
            view.prompt, view.prompt_known = prompt, True
        return stored

    async def in_context(self, conversation_id: str) -> list[StoredMessage]:
        """The messages currently sent to the model, in order (from memory while a turn of the
        conversation is open here, see ``jobs.TurnView``)."""
        view = self._views.get(conversation_id)
        if view is not None and view.context is not None:
            return list(view.context)

        def job(conn: sqlite3.Connection) -> list[StoredMessage]:
            return read_in_context(conn, self._context, conversation_id)

        messages = await self._run(job)
        view = self._views.get(conversation_id)
        if view is not None and view.context is None:
            view.context = list(messages)
        return messages

    async def transcript(
        self, conversation_id: str, since_seq: int | None = None, *, limit: int | None = None
    ) -> list[StoredMessage]:
        """Every message ever appended (evicted ones included) with ``seq > since_seq``, oldest first."""

        def job(conn: sqlite3.Connection) -> list[StoredMessage]:
            rows = conn.execute(
                f"SELECT {MSG_COLUMNS} FROM messages m WHERE m.conversation_id = ? AND m.seq > ? ORDER BY m.seq LIMIT ?",
                (conversation_id, since_seq or 0, -1 if limit is None else limit),
            ).fetchall()
            return [row_to_message(r) for r in rows]

        return await self._run(job)

    async def get_messages(self, ids: Sequence[str]) -> list[StoredMessage]:
        """The messages with these ids, in the order asked (unknown ids are left out)."""
        wanted = list(ids)

        def job(conn: sqlite3.Connection) -> list[StoredMessage]:
            found: dict[str, StoredMessage] = {}
            for start in range(0, len(wanted), 500):
                chunk = wanted[start : start + 500]
                marks = ",".join("?" * len(chunk))
                for row in conn.execute(
                    f"SELECT {MSG_COLUMNS} FROM messages m WHERE m.id IN ({marks})", chunk
                ):
                    found[row[0]] = row_to_message(row)
            return [found[i] for i in wanted if i in found]

        return await self._run(job)

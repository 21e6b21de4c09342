"""The conversation store facade: every method is one job on the connection worker, and every job that
writes more than one row is one ``BEGIN IMMEDIATE`` transaction, so a crash leaves either all of it or
none of it. See the package docstring for the call sequence of a turn."""

from __future__ import annotations

import json
import os
import socket
import sqlite3
import uuid
from collections.abc import AsyncIterator, Callable, Iterator, Mapping, Sequence
from contextlib import asynccontextmanager, contextmanager
from functools import partial
from pathlib import Path
from typing import Any, TypeVar, cast

import anyio

from orchestrator.base.paths import store_path
from orchestrator.base.processes import pid_alive
from orchestrator.models.types import Message, ToolCall
from orchestrator.store.projection import fts_expression, like_pattern, parse_bound, parse_query, project
from orchestrator.store.records import (
    Agent,
    Conversation,
    Event,
    PendingReminder,
    PromptRecord,
    SearchHit,
    StoredMessage,
    StoreError,
    Turn,
    TurnStatus,
    utc_now,
)
from orchestrator.store.reflections import ReflectionRecords
from orchestrator.store.schema import PARTS_PER_MESSAGE, configure_connection
from orchestrator.store.worker import ConnectionWorker

__all__ = ["LIKE_SCAN_MESSAGES", "REMINDER_QUEUE_LIMIT", "Store"]

T = TypeVar("T")

REMINDER_QUEUE_LIMIT = 25
"""turn-loop.md 4.7 item 6: the pending queue keeps the newest 25 entries."""

LIKE_SCAN_MESSAGES = 20_000
"""A query whose every needle is under 3 characters scans only this many newest messages in scope."""

_FINAL_STATUSES = {"end_turn", "error", "interrupted", "max_steps", "cancelled"}
_MSG_COLUMNS = "m.id, m.seq, m.conversation_id, m.role, m.kind, m.content, m.tool_calls, m.tool_call_id, m.name, m.metadata, m.created_at, m.turn_id"


def _new_id(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex}"


def _fault(step: str) -> None:
    """Crash-test hook (DECISIONS S29): ``REVERIE_FAULT=<step>`` kills the process at that step."""
    if os.environ.get("REVERIE_FAULT") == step:
        os._exit(91)


@contextmanager
def _transaction(conn: sqlite3.Connection) -> Iterator[None]:
    conn.execute("BEGIN IMMEDIATE")
    try:
        yield
    except BaseException:
        conn.execute("ROLLBACK")
        raise
    conn.execute("COMMIT")


def _dumps(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False, sort_keys=False)


def _row_to_message(row: sqlite3.Row | tuple[Any, ...]) -> StoredMessage:
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


def _conversation(row: tuple[Any, ...]) -> Conversation:
    return Conversation(id=row[0], agent_id=row[1], created_at=row[2], title=row[3], hidden=bool(row[4]))


def _agent(row: tuple[Any, ...]) -> Agent:
    return Agent(id=row[0], name=row[1], created_at=row[2], settings=json.loads(row[3]))


def _event(row: tuple[Any, ...]) -> Event:
    return Event(
        id=row[0], at=row[1], kind=row[2], agent_id=row[3], conversation_id=row[4], payload=json.loads(row[5])
    )


def _turn(row: tuple[Any, ...]) -> Turn:
    return Turn(
        id=row[0], conversation_id=row[1], started_at=row[2], ended_at=row[3], status=row[4], error=row[5]
    )


class Store(ReflectionRecords):
    """Async access to one SQLite conversation store. Create with ``await Store.open(path)`` or
    ``async with Store.opened(path) as store``; several processes may open the same file (WAL)."""

    def __init__(self, worker: ConnectionWorker, path: Path) -> None:
        self._worker = worker
        self.path = path

    # -- lifecycle -----------------------------------------------------------------------------------

    @classmethod
    async def open(cls, path: Path | str | None = None) -> Store:
        """Open (creating and migrating if needed) and mark turns left ``running`` by a dead process as
        ``interrupted``. ``path`` defaults to ``orchestrator.base.paths.store_path()``."""
        target = Path(path) if path is not None else store_path()
        await anyio.to_thread.run_sync(partial(target.parent.mkdir, parents=True, exist_ok=True))
        worker = ConnectionWorker(target, configure_connection)
        try:
            await worker.start()
        except sqlite3.DatabaseError as exc:
            raise StoreError(f"conversation store {target}: not usable ({exc})") from None
        store = cls(worker, target)
        try:
            await store.recover_interrupted_turns()
        except sqlite3.DatabaseError as exc:
            await worker.close()
            raise StoreError(f"conversation store {target}: not usable ({exc})") from None
        except BaseException:
            await worker.close()
            raise
        return store

    @classmethod
    @asynccontextmanager
    async def opened(cls, path: Path | str | None = None) -> AsyncIterator[Store]:
        store = await cls.open(path)
        try:
            yield store
        finally:
            await store.close()

    async def close(self) -> None:
        await self._worker.close()

    async def _run(self, fn: Callable[[sqlite3.Connection], T]) -> T:
        return await self._worker.run(fn)

    # -- agents and conversations ---------------------------------------------------------------------

    async def ensure_agent(
        self, agent_id: str, *, name: str | None = None, settings: Mapping[str, Any] | None = None
    ) -> Agent:
        """Create the agent if it does not exist (name defaults to the id); an existing agent is
        returned unchanged (use ``update_agent_settings`` to change it)."""

        def job(conn: sqlite3.Connection) -> Agent:
            with _transaction(conn):
                conn.execute(
                    "INSERT OR IGNORE INTO agents(id, name, created_at, settings) VALUES (?, ?, ?, ?)",
                    (agent_id, name or agent_id, utc_now(), _dumps(dict(settings or {}))),
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
            with _transaction(conn):
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
                    (name or row[1], _dumps(merged), agent_id),
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
                id=conversation_id or _new_id("conv"),
                agent_id=agent_id,
                created_at=utc_now(),
                title=title,
                hidden=hidden,
            )
            try:
                with _transaction(conn):
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

    async def set_conversation_title(self, conversation_id: str, title: str | None) -> None:
        def job(conn: sqlite3.Connection) -> None:
            with _transaction(conn):
                cur = conn.execute(
                    "UPDATE conversations SET title = ? WHERE id = ?", (title, conversation_id)
                )
                if cur.rowcount == 0:
                    raise StoreError(f"unknown conversation {conversation_id!r}")

        await self._run(job)

    async def last_message_at(self, agent_id: str, *, exclude_conversation: str | None = None) -> str | None:
        """When the agent last recorded a message (for the agent-info reminder's "Last message")."""

        def job(conn: sqlite3.Connection) -> str | None:
            row = conn.execute(
                "SELECT MAX(m.created_at) FROM messages m JOIN conversations c ON c.id = m.conversation_id "
                "WHERE c.agent_id = ? AND (? IS NULL OR c.id != ?)",
                (agent_id, exclude_conversation, exclude_conversation),
            ).fetchone()
            return cast("str | None", row[0])

        return await self._run(job)

    # -- messages ----------------------------------------------------------------------------------------

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
        written in the same transaction: the R4 path of turn-loop.md 2.6 appends its ``<memory_update>``
        and moves the prompt row together."""
        drafts = [(m, dict(metadata or {})) for m in messages]

        def job(conn: sqlite3.Connection) -> list[StoredMessage]:
            with _transaction(conn):
                stored = self._insert(conn, conversation_id, drafts, turn_id)
                if prompt is not None:
                    self._write_prompt(conn, prompt)
            return stored

        return await self._run(job)

    def _insert(
        self,
        conn: sqlite3.Connection,
        conversation_id: str,
        drafts: Sequence[tuple[Message, dict[str, Any]]],
        turn_id: str | None,
        *,
        in_context: bool = True,
    ) -> list[StoredMessage]:
        conv = conn.execute("SELECT agent_id FROM conversations WHERE id = ?", (conversation_id,)).fetchone()
        if conv is None:
            raise StoreError(f"unknown conversation {conversation_id!r}")
        position = conn.execute(
            "SELECT COALESCE(MAX(position), -1) FROM in_context WHERE conversation_id = ?", (conversation_id,)
        ).fetchone()[0]
        stored: list[StoredMessage] = []
        for message, metadata in drafts:
            mid = _new_id("msg")
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
                    _dumps(calls),
                    message.tool_call_id,
                    message.name,
                    _dumps(metadata),
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
            _fault("store.append.before_in_context")
            if in_context:
                position += 1
                conn.execute(
                    "INSERT INTO in_context(conversation_id, position, message_id) VALUES (?, ?, ?)",
                    (conversation_id, position, mid),
                )
            stored.append(StoredMessage(mid, seq, conversation_id, message, metadata, now, turn_id))
        return stored

    async def in_context(self, conversation_id: str) -> list[StoredMessage]:
        """The messages currently sent to the model, in order."""

        def job(conn: sqlite3.Connection) -> list[StoredMessage]:
            rows = conn.execute(
                f"SELECT {_MSG_COLUMNS} FROM in_context i JOIN messages m ON m.id = i.message_id "
                "WHERE i.conversation_id = ? ORDER BY i.position",
                (conversation_id,),
            ).fetchall()
            return [_row_to_message(r) for r in rows]

        return await self._run(job)

    async def transcript(
        self, conversation_id: str, since_seq: int | None = None, *, limit: int | None = None
    ) -> list[StoredMessage]:
        """Every message ever appended (evicted ones included) with ``seq > since_seq``, oldest first."""

        def job(conn: sqlite3.Connection) -> list[StoredMessage]:
            rows = conn.execute(
                f"SELECT {_MSG_COLUMNS} FROM messages m WHERE m.conversation_id = ? AND m.seq > ? ORDER BY m.seq LIMIT ?",
                (conversation_id, since_seq or 0, -1 if limit is None else limit),
            ).fetchall()
            return [_row_to_message(r) for r in rows]

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
                    f"SELECT {_MSG_COLUMNS} FROM messages m WHERE m.id IN ({marks})", chunk
                ):
                    found[row[0]] = _row_to_message(row)
            return [found[i] for i in wanted if i in found]

        return await self._run(job)

    async def replace_in_context(
        self,
        conversation_id: str,
        summary_message: Message,
        keep_ids: Sequence[str],
        *,
        metadata: Mapping[str, Any] | None = None,
        turn_id: str | None = None,
        prompt: PromptRecord | None = None,
        rearm: Sequence[str] = (),
    ) -> StoredMessage:
        """Compaction's commit point, one transaction: append the summary to the transcript, set the
        in-context list to ``[summary, *kept]`` (kept in their current order), and optionally store the
        recompiled prompt and re-arm one-shot reminders (turn-loop.md 7.5 item 4). Every id in
        ``keep_ids`` must be in context now; otherwise nothing changes and ``StoreError`` says which."""
        keep = list(keep_ids)

        def job(conn: sqlite3.Connection) -> StoredMessage:
            with _transaction(conn):
                current = [
                    r[0]
                    for r in conn.execute(
                        "SELECT message_id FROM in_context WHERE conversation_id = ? ORDER BY position",
                        (conversation_id,),
                    )
                ]
                missing = [i for i in keep if i not in set(current)]
                if missing:
                    raise StoreError(
                        f"cannot keep {missing[0]!r}: it is not in the context of {conversation_id!r}"
                    )
                wanted = set(keep)
                kept = [i for i in current if i in wanted]
                summary = self._insert(
                    conn,
                    conversation_id,
                    [(summary_message, dict(metadata or {}))],
                    turn_id,
                    in_context=False,
                )[0]
                conn.execute("DELETE FROM in_context WHERE conversation_id = ?", (conversation_id,))
                conn.executemany(
                    "INSERT INTO in_context(conversation_id, position, message_id) VALUES (?, ?, ?)",
                    [(conversation_id, n, mid) for n, mid in enumerate([summary.id, *kept])],
                )
                if prompt is not None:
                    self._write_prompt(conn, prompt)
                self._rearm(conn, conversation_id, rearm)
            return summary

        return await self._run(job)

    # -- compiled system prompt ------------------------------------------------------------------------

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
            with _transaction(conn):
                self._write_prompt(conn, record)

        await self._run(job)

    async def mark_prompt_sent(self, conversation_id: str) -> None:
        """Set ``first_sent_at`` if it is still null: a provider request carried this content."""

        def job(conn: sqlite3.Connection) -> None:
            with _transaction(conn):
                conn.execute(
                    "UPDATE prompts SET first_sent_at = ? WHERE conversation_id = ? AND first_sent_at IS NULL",
                    (utc_now(), conversation_id),
                )

        await self._run(job)

    @staticmethod
    def _write_prompt(conn: sqlite3.Connection, r: PromptRecord) -> None:
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

    # -- reminders -------------------------------------------------------------------------------------

    async def enqueue_reminder(
        self, conversation_id: str, key: str, text: str, *, priority: int = 100, once: bool = False
    ) -> bool:
        """Queue ``text`` for the start of the conversation's next turn (DECISIONS T2, S15).

        ``key`` dedups: a pending reminder with the same key is replaced (new text, same place), so a
        reminder queued after every turn is delivered once per turn, never accumulating. Delivery order
        is ``priority`` (lower first), then queueing order. ``once=True`` makes it a one-shot reminder
        (agent-info): it is not queued if already sent, and delivering it marks it sent until
        ``rearm``. Returns whether the reminder is now pending."""

        def job(conn: sqlite3.Connection) -> bool:
            with _transaction(conn):
                if (
                    conn.execute("SELECT 1 FROM conversations WHERE id = ?", (conversation_id,)).fetchone()
                    is None
                ):
                    raise StoreError(f"unknown conversation {conversation_id!r}")
                if once and self._was_sent(conn, conversation_id, key):
                    return False
                updated = conn.execute(
                    "UPDATE reminders SET text = ?, priority = ?, once = ? "
                    "WHERE conversation_id = ? AND key = ? AND delivered_at IS NULL",
                    (text, priority, int(once), conversation_id, key),
                ).rowcount
                if not updated:
                    conn.execute(
                        "INSERT INTO reminders(conversation_id, key, text, priority, once, enqueued_at) VALUES (?, ?, ?, ?, ?, ?)",
                        (conversation_id, key, text, priority, int(once), utc_now()),
                    )
                conn.execute(
                    "DELETE FROM reminders WHERE id IN (SELECT id FROM reminders WHERE conversation_id = ? "
                    "AND delivered_at IS NULL ORDER BY id DESC LIMIT -1 OFFSET ?)",
                    (conversation_id, REMINDER_QUEUE_LIMIT),
                )
                return True

        return await self._run(job)

    async def cancel_reminder(self, conversation_id: str, key: str) -> bool:
        """Drop a pending reminder (e.g. the repository became clean before the next turn)."""

        def job(conn: sqlite3.Connection) -> bool:
            with _transaction(conn):
                return (
                    conn.execute(
                        "DELETE FROM reminders WHERE conversation_id = ? AND key = ? AND delivered_at IS NULL",
                        (conversation_id, key),
                    ).rowcount
                    > 0
                )

        return await self._run(job)

    async def pending_reminders(self, conversation_id: str) -> list[PendingReminder]:
        def job(conn: sqlite3.Connection) -> list[PendingReminder]:
            return self._pending(conn, conversation_id)

        return await self._run(job)

    @staticmethod
    def _pending(conn: sqlite3.Connection, conversation_id: str) -> list[PendingReminder]:
        rows = conn.execute(
            "SELECT key, text, priority, once, enqueued_at FROM reminders "
            "WHERE conversation_id = ? AND delivered_at IS NULL ORDER BY priority, id",
            (conversation_id,),
        ).fetchall()
        return [
            PendingReminder(key=r[0], text=r[1], priority=r[2], once=bool(r[3]), enqueued_at=r[4])
            for r in rows
        ]

    async def deliver_reminders(
        self,
        conversation_id: str,
        *,
        followed_by: Sequence[Message] = (),
        turn_id: str | None = None,
        metadata: Mapping[str, Any] | None = None,
    ) -> list[StoredMessage]:
        """Turn start, one transaction: take every pending reminder, append them as ONE user-role message
        of kind ``reminder`` (texts joined with ``\\n\\n``, in delivery order; metadata
        ``reminder_keys``), then append ``followed_by`` (the user's message, with ``metadata``), mark the
        reminders delivered and the one-shot ones sent. With nothing pending only ``followed_by`` is
        appended. Returns the stored messages in order."""
        extra = list(followed_by)

        def job(conn: sqlite3.Connection) -> list[StoredMessage]:
            with _transaction(conn):
                pending = self._pending(conn, conversation_id)
                drafts: list[tuple[Message, dict[str, Any]]] = []
                if pending:
                    text = "\n\n".join(p.text for p in pending)
                    drafts.append(
                        (
                            Message(role="user", content=text, kind="reminder"),
                            {"reminder_keys": [p.key for p in pending]},
                        )
                    )
                drafts.extend((m, dict(metadata or {})) for m in extra)
                stored = self._insert(conn, conversation_id, drafts, turn_id)
                if pending:
                    now = utc_now()
                    conn.execute(
                        "UPDATE reminders SET delivered_at = ?, message_id = ? WHERE conversation_id = ? AND delivered_at IS NULL",
                        (now, stored[0].id, conversation_id),
                    )
                    conn.executemany(
                        "INSERT OR REPLACE INTO reminder_flags(conversation_id, key, sent_at) VALUES (?, ?, ?)",
                        [(conversation_id, p.key, now) for p in pending if p.once],
                    )
            return stored

        return await self._run(job)

    async def mark_sent(self, conversation_id: str, *keys: str) -> None:
        def job(conn: sqlite3.Connection) -> None:
            with _transaction(conn):
                now = utc_now()
                conn.executemany(
                    "INSERT OR REPLACE INTO reminder_flags(conversation_id, key, sent_at) VALUES (?, ?, ?)",
                    [(conversation_id, k, now) for k in keys],
                )

        await self._run(job)

    async def was_sent(self, conversation_id: str, key: str) -> bool:
        def job(conn: sqlite3.Connection) -> bool:
            return self._was_sent(conn, conversation_id, key)

        return await self._run(job)

    @staticmethod
    def _was_sent(conn: sqlite3.Connection, conversation_id: str, key: str) -> bool:
        row = conn.execute(
            "SELECT 1 FROM reminder_flags WHERE conversation_id = ? AND key = ?", (conversation_id, key)
        ).fetchone()
        return row is not None

    async def rearm(self, conversation_id: str, *keys: str) -> None:
        """Forget that these one-shot reminders were sent, so they go out again (after compaction)."""

        def job(conn: sqlite3.Connection) -> None:
            with _transaction(conn):
                self._rearm(conn, conversation_id, keys)

        await self._run(job)

    @staticmethod
    def _rearm(conn: sqlite3.Connection, conversation_id: str, keys: Sequence[str]) -> None:
        conn.executemany(
            "DELETE FROM reminder_flags WHERE conversation_id = ? AND key = ?",
            [(conversation_id, k) for k in keys],
        )

    # -- events ----------------------------------------------------------------------------------------

    async def record_event(
        self,
        kind: str,
        payload: Mapping[str, Any] | None = None,
        *,
        agent_id: str | None = None,
        conversation_id: str | None = None,
    ) -> Event:
        """Append to the event log (DECISIONS S8). ``kind`` is a dotted name such as
        ``compaction.started``; ``payload`` must be JSON-serialisable."""
        body = dict(payload or {})
        text = _dumps(body)

        def job(conn: sqlite3.Connection) -> Event:
            at = utc_now()
            with _transaction(conn):
                cur = conn.execute(
                    "INSERT INTO events(at, kind, agent_id, conversation_id, payload) VALUES (?, ?, ?, ?, ?)",
                    (at, kind, agent_id, conversation_id, text),
                )
            return Event(cast(int, cur.lastrowid), at, kind, agent_id, conversation_id, body)

        return await self._run(job)

    async def events(
        self,
        *,
        agent_id: str | None = None,
        conversation_id: str | None = None,
        kinds: Sequence[str] | None = None,
        after_id: int = 0,
        limit: int | None = None,
    ) -> list[Event]:
        """Events oldest first, filtered; ``after_id`` lets a follower poll for new ones."""
        kind_list = list(kinds) if kinds is not None else None

        def job(conn: sqlite3.Connection) -> list[Event]:
            sql = "SELECT id, at, kind, agent_id, conversation_id, payload FROM events WHERE id > ?"
            args: list[Any] = [after_id]
            if agent_id is not None:
                sql += " AND agent_id = ?"
                args.append(agent_id)
            if conversation_id is not None:
                sql += " AND conversation_id = ?"
                args.append(conversation_id)
            if kind_list is not None:
                sql += f" AND kind IN ({','.join('?' * len(kind_list))})"
                args.extend(kind_list)
            sql += " ORDER BY id LIMIT ?"
            args.append(-1 if limit is None else limit)
            return [_event(r) for r in conn.execute(sql, args)]

        return await self._run(job)

    # -- turns -----------------------------------------------------------------------------------------

    async def begin_turn(self, conversation_id: str) -> str:
        """Record a turn as ``running``; if the process dies before ``end_turn``, the next ``open``
        (in any process) marks it ``interrupted``."""

        def job(conn: sqlite3.Connection) -> str:
            turn_id = _new_id("turn")
            with _transaction(conn):
                if (
                    conn.execute("SELECT 1 FROM conversations WHERE id = ?", (conversation_id,)).fetchone()
                    is None
                ):
                    raise StoreError(f"unknown conversation {conversation_id!r}")
                conn.execute(
                    "INSERT INTO turns(id, conversation_id, started_at, status, owner_host, owner_pid) "
                    "VALUES (?, ?, ?, 'running', ?, ?)",
                    (turn_id, conversation_id, utc_now(), socket.gethostname(), os.getpid()),
                )
            return turn_id

        return await self._run(job)

    async def end_turn(self, turn_id: str, status: TurnStatus, error: str | None = None) -> None:
        if status not in _FINAL_STATUSES:
            raise StoreError(f"end_turn: status must be one of {sorted(_FINAL_STATUSES)}, not {status!r}")

        def job(conn: sqlite3.Connection) -> None:
            with _transaction(conn):
                cur = conn.execute(
                    "UPDATE turns SET status = ?, error = ?, ended_at = ? WHERE id = ?",
                    (status, error, utc_now(), turn_id),
                )
                if cur.rowcount == 0:
                    raise StoreError(f"unknown turn {turn_id!r}")

        await self._run(job)

    async def get_turn(self, turn_id: str) -> Turn | None:
        def job(conn: sqlite3.Connection) -> Turn | None:
            row = conn.execute(
                "SELECT id, conversation_id, started_at, ended_at, status, error FROM turns WHERE id = ?",
                (turn_id,),
            ).fetchone()
            return _turn(row) if row else None

        return await self._run(job)

    async def turns(self, conversation_id: str) -> list[Turn]:
        def job(conn: sqlite3.Connection) -> list[Turn]:
            rows = conn.execute(
                "SELECT id, conversation_id, started_at, ended_at, status, error FROM turns "
                "WHERE conversation_id = ? ORDER BY started_at, rowid",
                (conversation_id,),
            ).fetchall()
            return [_turn(r) for r in rows]

        return await self._run(job)

    async def recover_interrupted_turns(self) -> list[Turn]:
        """Mark ``interrupted`` every running turn whose owning process (on this host) is gone.
        Turns of live processes, and of other hosts, are left alone."""
        host = socket.gethostname()

        def job(conn: sqlite3.Connection) -> list[Turn]:
            with _transaction(conn):
                rows = conn.execute(
                    "SELECT id, owner_host, owner_pid FROM turns WHERE status = 'running'"
                ).fetchall()
                dead = [r[0] for r in rows if r[1] == host and not pid_alive(r[2])]
                now = utc_now()
                conn.executemany(
                    "UPDATE turns SET status = 'interrupted', ended_at = ?, error = 'process ended during the turn' WHERE id = ?",
                    [(now, t) for t in dead],
                )
                found = [
                    conn.execute(
                        "SELECT id, conversation_id, started_at, ended_at, status, error FROM turns WHERE id = ?",
                        (t,),
                    ).fetchone()
                    for t in dead
                ]
            return [_turn(r) for r in found]

        return await self._run(job)

    # -- search ----------------------------------------------------------------------------------------

    async def search(
        self,
        query: str,
        *,
        agent_id: str | None = None,
        conversation_id: str | None = None,
        all_agents: bool = False,
        limit: int = 100,
        start_date: str | None = None,
        end_date: str | None = None,
        message_types: Sequence[str] | None = None,
        include_hidden: bool = False,
    ) -> list[SearchHit]:
        """Search the durable transcript (compaction.md section 8, DECISIONS C7/S7).

        Query parsing is 8.2's; every term and phrase must occur as a substring (AND). Needles of 3+
        characters go through FTS5 (trigram) and rank by BM25; shorter ones filter by LIKE, and a query
        made only of short needles scans the newest ``LIKE_SCAN_MESSAGES`` messages in scope, newest
        first. Ties break newest first. Scope: ``agent_id``, ``conversation_id`` (both may be given) or
        ``all_agents=True``; hidden conversations are skipped unless ``include_hidden``."""
        if agent_id is None and conversation_id is None and not all_agents:
            raise StoreError("search needs an agent id, a conversation id or all_agents=True")
        parsed = parse_query(query)
        needles = parsed.needles
        if parsed.empty or not needles or limit <= 0:
            return []
        start = parse_bound(start_date, end=False)
        end = parse_bound(end_date, end=True)
        types = list(message_types) if message_types is not None else None

        def job(conn: sqlite3.Connection) -> list[SearchHit]:
            where = ["(? OR c.hidden = 0)"]
            args: list[Any] = [include_hidden]
            if agent_id is not None:
                where.append("c.agent_id = ?")
                args.append(agent_id)
            if conversation_id is not None:
                where.append("m.conversation_id = ?")
                args.append(conversation_id)
            scope_sql = " AND ".join(where)
            filters: list[str] = []
            fargs: list[Any] = []
            for needle in needles:
                if len(needle) < 3:
                    filters.append("f.text LIKE ? ESCAPE '\\'")
                    fargs.append(like_pattern(needle))
            if start is not None:
                filters.append("f.date >= ?")
                fargs.append(start)
            if end is not None:
                filters.append("f.date <= ?")
                fargs.append(end)
            if types is not None:
                filters.append(f"f.message_type IN ({','.join('?' * len(types))})")
                fargs.extend(types)
            filter_sql = "".join(f" AND {f}" for f in filters)
            expression = fts_expression(needles)
            if expression is not None:
                sql = (
                    "SELECT f.rowid, bm25(search_fts) AS score, f.date, c.agent_id, m.conversation_id "
                    "FROM search_fts f JOIN messages m ON m.seq = f.rowid / ? "
                    "JOIN conversations c ON c.id = m.conversation_id "
                    f"WHERE search_fts MATCH ? AND {scope_sql}{filter_sql} "
                    "ORDER BY score, f.date DESC, f.rowid DESC LIMIT ?"
                )
                params = [PARTS_PER_MESSAGE, expression, *args, *fargs, limit]
            else:
                sql = (
                    "SELECT f.rowid, 0.0 AS score, f.date, s.agent_id, s.conversation_id FROM ("
                    "SELECT m.seq, c.agent_id, m.conversation_id FROM messages m "
                    f"JOIN conversations c ON c.id = m.conversation_id WHERE {scope_sql} ORDER BY m.seq DESC LIMIT ?"
                    ") s JOIN search_fts f ON f.rowid BETWEEN s.seq * ? AND s.seq * ? + ? "
                    f"WHERE 1{filter_sql} ORDER BY f.date DESC, f.rowid DESC LIMIT ?"
                )
                params = [
                    *args,
                    LIKE_SCAN_MESSAGES,
                    PARTS_PER_MESSAGE,
                    PARTS_PER_MESSAGE,
                    PARTS_PER_MESSAGE - 1,
                    *fargs,
                    limit,
                ]
            rows = conn.execute(sql, params).fetchall()
            hits: list[SearchHit] = []
            cache: dict[int, StoredMessage] = {}
            for rowid, score, _date, hit_agent, hit_conv in rows:
                seq, part = divmod(rowid, PARTS_PER_MESSAGE)
                if seq not in cache:
                    row = conn.execute(
                        f"SELECT {_MSG_COLUMNS} FROM messages m WHERE m.seq = ?", (seq,)
                    ).fetchone()
                    cache[seq] = _row_to_message(row)
                sm = cache[seq]
                parts = project(sm.id, sm.message, sm.metadata, sm.created_at, hit_agent, hit_conv)
                p = parts[part]
                hits.append(
                    SearchHit(
                        message_id=p.id,
                        message_type=p.message_type,
                        created_at=p.date,
                        agent_id=hit_agent,
                        conversation_id=hit_conv,
                        seq=seq,
                        score=float(score),
                        fields=p.fields,
                    )
                )
            return hits

        return await self._run(job)

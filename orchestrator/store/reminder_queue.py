"""The reminder queue (T2, S15; TURN-4.7): text queued for the start of a
conversation's next turn, deduplicated by key, delivered as one ``reminder`` message in the same
transaction as the user's message, and one-shot flags (agent-info) that survive restarts until re-armed."""

from __future__ import annotations

import sqlite3
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from orchestrator.models.types import Message
from orchestrator.store.jobs import StoreJobs, require_conversation, transaction
from orchestrator.store.records import PendingReminder, StoredMessage, utc_now
from orchestrator.store.transcript import ContextCache, insert_messages

__all__ = [
    "REMINDER_QUEUE_LIMIT",
    "EnqueuePlan",
    "ReminderQueue",
    "cancel",
    "deliver",
    "enqueue",
    "plan_enqueue",
    "rearm_keys",
    "reminder_message",
    "sent_flag",
]

REMINDER_QUEUE_LIMIT = 25
"""TURN-4.7 item 6: the pending queue keeps the newest 25 entries."""


@dataclass(frozen=True)
class EnqueuePlan:
    """How queueing one reminder changes the queue, decided apart from the SQL that applies it."""

    replace: bool
    """A pending reminder has this key: it takes the new text in its place in the queue."""
    evict: tuple[str, ...]
    """Keys of the oldest pending reminders to drop so the queue keeps the newest ``limit``."""


def plan_enqueue(queued: Sequence[str], key: str, limit: int = REMINDER_QUEUE_LIMIT) -> EnqueuePlan:
    """The queue's policy, apart from its SQL: ``queued`` is the pending keys oldest first (unique, as
    the table's index guarantees); queueing ``key`` either replaces its namesake or appends and pushes
    the oldest entries out beyond ``limit``."""
    if key in queued:
        return EnqueuePlan(replace=True, evict=())
    overflow = max(0, len(queued) + 1 - limit)
    return EnqueuePlan(replace=False, evict=tuple(queued[:overflow]))


def _pending(conn: sqlite3.Connection, conversation_id: str) -> list[PendingReminder]:
    rows = conn.execute(
        "SELECT key, text, priority, once, enqueued_at FROM reminders "
        "WHERE conversation_id = ? AND delivered_at IS NULL ORDER BY priority, id",
        (conversation_id,),
    ).fetchall()
    return [
        PendingReminder(key=r[0], text=r[1], priority=r[2], once=bool(r[3]), enqueued_at=r[4]) for r in rows
    ]


def sent_flag(conn: sqlite3.Connection, conversation_id: str, key: str) -> bool:
    row = conn.execute(
        "SELECT 1 FROM reminder_flags WHERE conversation_id = ? AND key = ?", (conversation_id, key)
    ).fetchone()
    return row is not None


def rearm_keys(conn: sqlite3.Connection, conversation_id: str, keys: Sequence[str]) -> None:
    conn.executemany(
        "DELETE FROM reminder_flags WHERE conversation_id = ? AND key = ?",
        [(conversation_id, k) for k in keys],
    )


def enqueue(conn: sqlite3.Connection, conversation_id: str, key: str, text: str, *, priority: int, once: bool) -> bool:
    """``ReminderQueue.enqueue_reminder`` inside the caller's transaction (the conversation exists)."""
    if once and sent_flag(conn, conversation_id, key):
        return False
    queued = [
        r[0]
        for r in conn.execute(
            "SELECT key FROM reminders WHERE conversation_id = ? AND delivered_at IS NULL ORDER BY id",
            (conversation_id,),
        )
    ]
    plan = plan_enqueue(queued, key)
    if plan.replace:
        conn.execute(
            "UPDATE reminders SET text = ?, priority = ?, once = ? "
            "WHERE conversation_id = ? AND key = ? AND delivered_at IS NULL",
            (text, priority, int(once), conversation_id, key),
        )
    else:
        conn.execute(
            "INSERT INTO reminders(conversation_id, key, text, priority, once, enqueued_at) VALUES (?, ?, ?, ?, ?, ?)",
            (conversation_id, key, text, priority, int(once), utc_now()),
        )
    conn.executemany(
        "DELETE FROM reminders WHERE conversation_id = ? AND key = ? AND delivered_at IS NULL",
        [(conversation_id, k) for k in plan.evict],
    )
    return True


def cancel(conn: sqlite3.Connection, conversation_id: str, key: str) -> bool:
    """``ReminderQueue.cancel_reminder`` inside the caller's transaction."""
    return (
        conn.execute(
            "DELETE FROM reminders WHERE conversation_id = ? AND key = ? AND delivered_at IS NULL",
            (conversation_id, key),
        ).rowcount
        > 0
    )


def reminder_message(texts: Sequence[str]) -> Message:
    """The one ``reminder`` message a turn's pending reminders become, ``texts`` in delivery order."""
    return Message(role="user", content="\n\n".join(texts), kind="reminder")


def deliver(
    conn: sqlite3.Connection,
    conversation_id: str,
    drafts: Sequence[tuple[Message, dict[str, Any]]],
    turn_id: str | None,
) -> list[StoredMessage]:
    """``ReminderQueue.deliver_reminders`` inside the caller's transaction."""
    pending = _pending(conn, conversation_id)
    batch: list[tuple[Message, dict[str, Any]]] = []
    if pending:
        batch.append((reminder_message([p.text for p in pending]), {"reminder_keys": [p.key for p in pending]}))
    batch.extend(drafts)
    stored = insert_messages(conn, conversation_id, batch, turn_id)
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


class ReminderQueue(StoreJobs):
    """Mixed into ``Store``: the ``reminders`` and ``reminder_flags`` tables."""

    _context: ContextCache

    async def enqueue_reminder(
        self, conversation_id: str, key: str, text: str, *, priority: int = 100, once: bool = False
    ) -> bool:
        """Queue ``text`` for the start of the conversation's next turn (T2, S15).

        ``key`` dedups: a pending reminder with the same key is replaced (new text, same place), so a
        reminder queued after every turn is delivered once per turn, never accumulating. Delivery order
        is ``priority`` (lower first), then queueing order. ``once=True`` makes it a one-shot reminder
        (agent-info): it is not queued if already sent, and delivering it marks it sent until
        ``rearm``. Returns whether the reminder is now pending."""

        def job(conn: sqlite3.Connection) -> bool:
            require_conversation(conn, conversation_id)
            return enqueue(conn, conversation_id, key, text, priority=priority, once=once)

        return await self._write(job)

    async def cancel_reminder(self, conversation_id: str, key: str) -> bool:
        """Drop a pending reminder (e.g. the repository became clean before the next turn)."""

        return await self._write(lambda conn: cancel(conn, conversation_id, key))

    async def pending_reminders(self, conversation_id: str) -> list[PendingReminder]:
        def job(conn: sqlite3.Connection) -> list[PendingReminder]:
            return _pending(conn, conversation_id)

        return await self._run(job)

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
            return deliver(conn, conversation_id, [(m, dict(metadata or {})) for m in extra], turn_id)

        stored = await self._write(job, after=lambda done: self._context.appended(conversation_id, done))
        self._viewed_append(conversation_id, stored)
        return stored

    async def mark_sent(self, conversation_id: str, *keys: str) -> None:
        def job(conn: sqlite3.Connection) -> None:
            with transaction(conn):
                now = utc_now()
                conn.executemany(
                    "INSERT OR REPLACE INTO reminder_flags(conversation_id, key, sent_at) VALUES (?, ?, ?)",
                    [(conversation_id, k, now) for k in keys],
                )

        await self._run(job)

    async def was_sent(self, conversation_id: str, key: str) -> bool:
        def job(conn: sqlite3.Connection) -> bool:
            return sent_flag(conn, conversation_id, key)

        return await self._run(job)

    async def rearm(self, conversation_id: str, *keys: str) -> None:
        """Forget that these one-shot reminders were sent, so they go out again (after compaction)."""

        def job(conn: sqlite3.Connection) -> None:
            with transaction(conn):
                rearm_keys(conn, conversation_id, keys)

        await self._run(job)

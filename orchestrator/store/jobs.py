"""What every part of the store shares: the base class that hands a job to the connection worker, the
one transaction shape (``BEGIN IMMEDIATE``, rollback on any exception, so a crash leaves all of a
job's rows or none), JSON encoding, ids and the crash-test hook. Each concept module (conversations,
transcript, prompts, reminder queue, events, turns, search, reflections) is a mixin over ``StoreJobs``
and ``Store`` combines them behind one facade.

Two pieces of loop-side state live here because every concept touches them:

* **staged events** (``Events.stage_event``): an event whose recording may wait for the store's next
  write rides in that write's transaction (``_write``) instead of costing a job of its own. Nothing
  staged is lost by a cancelled caller: a job handed to its lane always runs, and a write that fails
  puts the events back for the next one (``Store.close`` writes what is left).
* **turn views** (``TurnView``): while a turn is open in this process (``Store.open_turn`` until
  ``close_turn``) the conversation's in-context list and prompt row are served from memory. The
  conversation has one writer then (the supervisor's lock and ``flock``, TURN-1.2 rule 1),
  and it writes through this ``Store``, whose methods keep the view in step after each commit; so a
  turn reads them from SQLite once, at its start, not once per request.

Followers (``Events.follow_events``) hear committed events in commit order: the lane appends them to
``_unannounced`` right after the commit (one connection's jobs run one at a time in one lane, so
that is id order), and whichever writer the loop resumes first announces everything queued. The
writers of a batch of jobs are woken together and resumed in any order (trio shuffles them), so
announcing each writer's own events would deliver a later id before an earlier one."""

from __future__ import annotations

import json
import sqlite3
import uuid
from collections import deque
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, TypeVar, cast

from orchestrator.base.faults import fault_point_sync
from orchestrator.store.records import Event, PromptRecord, StoredMessage, StoreError, utc_now
from orchestrator.store.worker import ConnectionWorker

__all__ = [
    "EventListener",
    "StagedEvent",
    "StoreJobs",
    "TurnView",
    "dumps",
    "fault",
    "insert_events",
    "new_id",
    "require_conversation",
    "staged_event",
    "transaction",
]

T = TypeVar("T")

StagedEvent = tuple[str, str, str | None, str | None, dict[str, Any], str]
"""``(at, kind, agent_id, conversation_id, payload, payload as JSON)`` of an event waiting for the
next write."""

EventListener = Callable[[Event], None]
"""Called on the loop, in recording order, with each event this store records; it must not block."""


@dataclass
class TurnView:
    """A conversation's in-context list and prompt row as this process knows them during a turn
    (``None``: not known, read from SQLite on next use). Touched only on the event loop."""

    context: list[StoredMessage] | None
    prompt: PromptRecord | None
    prompt_known: bool


def staged_event(
    kind: str, payload: Mapping[str, Any] | None, agent_id: str | None, conversation_id: str | None
) -> StagedEvent:
    """An event to record, timed now; ``payload`` is encoded here, so one that is not
    JSON-serialisable fails its caller, not the write that carries it."""
    body = dict(payload or {})
    return (utc_now(), kind, agent_id, conversation_id, body, dumps(body))


def insert_events(conn: sqlite3.Connection, staged: Sequence[StagedEvent]) -> list[Event]:
    """Insert ``staged`` in order; the caller owns the transaction."""
    recorded = []
    for at, kind, agent_id, conversation_id, body, text in staged:
        cur = conn.execute(
            "INSERT INTO events(at, kind, agent_id, conversation_id, payload) VALUES (?, ?, ?, ?, ?)",
            (at, kind, agent_id, conversation_id, text),
        )
        recorded.append(Event(cast(int, cur.lastrowid), at, kind, agent_id, conversation_id, body))
    return recorded


class StoreJobs:
    """The one way a store method reaches SQLite: ``await self._run(job)`` with ``job(conn)`` run in the
    connection worker (see ``worker``), or ``await self._write(body)`` for a write transaction that
    carries the staged events with it."""

    _worker: ConnectionWorker
    _event_listeners: list[EventListener]
    _staged: list[StagedEvent]
    _unannounced: deque[Event]
    _views: dict[str, TurnView]

    async def _run(self, fn: Callable[[sqlite3.Connection], T]) -> T:
        return await self._worker.run(fn)

    async def _write(
        self,
        body: Callable[[sqlite3.Connection], T],
        after: Callable[[T], None] | None = None,
        *,
        events: Sequence[StagedEvent] = (),
    ) -> T:
        """``body(conn)`` in one ``BEGIN IMMEDIATE`` transaction, after the staged events (so they are
        committed with it, or put back if it fails) and ``events`` (committed with it or not at all);
        ``after(result)`` then runs in the lane, after the commit (the lane-side caches). Listeners
        hear of the events once committed."""
        return (await self._write_events(body, after, events=events))[0]

    async def _write_events(
        self,
        body: Callable[[sqlite3.Connection], T],
        after: Callable[[T], None] | None = None,
        *,
        events: Sequence[StagedEvent] = (),
    ) -> tuple[T, list[Event]]:
        """``_write`` that also returns the events it committed, in order."""
        staged, self._staged = self._staged, []
        committed: list[Event] = []

        def job(conn: sqlite3.Connection) -> T:
            with transaction(conn):
                recorded = insert_events(conn, [*staged, *events])
                result = body(conn)
            committed.extend(recorded)
            self._unannounced.extend(recorded)
            if after is not None:
                after(result)
            return result

        try:
            result = await self._run(job)
        except BaseException:
            if staged and not committed:
                self._staged[:0] = staged
            raise
        finally:
            self._announce()
        return result, committed

    def _viewed_append(self, conversation_id: str, stored: Sequence[StoredMessage]) -> None:
        """Keep an open turn's view in step with messages this store just committed to its context."""
        view = self._views.get(conversation_id)
        if view is not None and view.context is not None:
            view.context.extend(stored)

    def _announce(self) -> None:
        """Tell the listeners about every event committed so far and not yet told, oldest first."""
        queued = self._unannounced
        while queued:
            event = queued.popleft()
            for listener in tuple(self._event_listeners):
                listener(event)


def new_id(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex}"


def fault(step: str) -> None:
    """The store's crash-test steps (:mod:`orchestrator.base.faults`, synchronous: worker thread)."""
    fault_point_sync(step)


@contextmanager
def transaction(conn: sqlite3.Connection) -> Iterator[None]:
    conn.execute("BEGIN IMMEDIATE")
    try:
        yield
    except BaseException:
        conn.execute("ROLLBACK")
        raise
    conn.execute("COMMIT")


_ENCODE = json.JSONEncoder(ensure_ascii=False, sort_keys=False).encode


def dumps(value: Any) -> str:
    """``json.dumps(value, ensure_ascii=False)``, from one encoder built once: ``json.dumps`` builds a
    new ``JSONEncoder`` on every call given any option (2.2 -> 1.5 us for an event's payload, a few
    dozen per batch task)."""
    return _ENCODE(value)


def require_conversation(conn: sqlite3.Connection, conversation_id: str) -> None:
    if conn.execute("SELECT 1 FROM conversations WHERE id = ?", (conversation_id,)).fetchone() is None:
        raise StoreError(f"unknown conversation {conversation_id!r}")

"""The event log (DECISIONS S8): append-only rows of a dotted ``kind`` and a JSON payload, read back
oldest first with filters so a follower can poll with ``after_id``. A follower in the same process
need not poll at all: ``follow_events`` hands it every event this store records as it is recorded."""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Callable, Mapping, Sequence
from typing import Any, cast

from orchestrator.store.jobs import StoreJobs, dumps, transaction
from orchestrator.store.records import Event, utc_now

__all__ = ["EventListener", "Events"]

EventListener = Callable[[Event], None]
"""Called on the loop, in recording order, with each event this store records; it must not block."""


def _event(row: tuple[Any, ...]) -> Event:
    return Event(
        id=row[0], at=row[1], kind=row[2], agent_id=row[3], conversation_id=row[4], payload=json.loads(row[5])
    )


class Events(StoreJobs):
    """Mixed into ``Store``: the ``events`` table."""

    _event_listeners: list[EventListener]

    def follow_events(self, listener: EventListener) -> Callable[[], None]:
        """Tell ``listener`` about every event recorded through this store from now on, instead of a
        query per event; returns the function that stops it. Events other processes or other
        ``Store`` objects record are not seen: read those with ``events(after_id=...)``."""
        self._event_listeners.append(listener)

        def stop() -> None:
            if listener in self._event_listeners:
                self._event_listeners.remove(listener)

        return stop

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
        text = dumps(body)

        def job(conn: sqlite3.Connection) -> Event:
            at = utc_now()
            with transaction(conn):
                cur = conn.execute(
                    "INSERT INTO events(at, kind, agent_id, conversation_id, payload) VALUES (?, ?, ?, ?, ?)",
                    (at, kind, agent_id, conversation_id, text),
                )
            return Event(cast(int, cur.lastrowid), at, kind, agent_id, conversation_id, body)

        event = await self._run(job)
        for listener in tuple(self._event_listeners):
            listener(event)
        return event

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

    async def last_event_id(self) -> int:
        """The newest event's id (0 for none): a mark to read what happens from now on."""

        def job(conn: sqlite3.Connection) -> int:
            row = conn.execute("SELECT COALESCE(MAX(id), 0) FROM events").fetchone()
            return int(row[0])

        return await self._run(job)

"""The event log (S8): append-only rows of a dotted ``kind`` and a JSON payload, read back
oldest first with filters so a follower can poll with ``after_id``. A follower in the same process
need not poll at all: ``follow_events`` hands it every event this store records as it is recorded.

``stage_event`` is ``record_event`` for events that may wait for the store's next write (the turn
loop's ``model.call``, ``turn.ended``...): they are committed in that write's transaction, in order,
before its own rows, and followers hear of them then (see ``jobs``)."""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from orchestrator.store.jobs import EventListener, StoreJobs, staged_event
from orchestrator.store.records import Event

__all__ = ["EventListener", "Events"]


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
        """Append to the event log (S8). ``kind`` is a dotted name such as
        ``compaction.started``; ``payload`` must be JSON-serialisable."""
        self.stage_event(kind, payload, agent_id=agent_id, conversation_id=conversation_id)
        _, recorded = await self._write_events(_nothing)
        return recorded[-1]

    def stage_event(
        self,
        kind: str,
        payload: Mapping[str, Any] | None = None,
        *,
        agent_id: str | None = None,
        conversation_id: str | None = None,
    ) -> None:
        """Record with the store's next write (or ``flush_events``, or ``close``), keeping the order
        events are staged and recorded in; ``at`` is now, when it happened. ``payload`` is encoded
        here, so one that is not JSON-serialisable fails its caller, not the write that carries it."""
        self._staged.append(staged_event(kind, payload, agent_id, conversation_id))

    async def flush_events(self) -> None:
        """Commit what ``stage_event`` holds now (a no-op when nothing is staged)."""
        if self._staged:
            await self._write(_nothing)

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

    async def last_event(self, *, agent_id: str, kinds: Sequence[str]) -> Event | None:
        """The agent's newest event of one of ``kinds``, or None (one indexed row, however long the log)."""
        kind_list = list(kinds)

        def job(conn: sqlite3.Connection) -> Event | None:
            row = conn.execute(
                "SELECT id, at, kind, agent_id, conversation_id, payload FROM events WHERE agent_id = ? "
                f"AND kind IN ({','.join('?' * len(kind_list))}) ORDER BY id DESC LIMIT 1",
                [agent_id, *kind_list],
            ).fetchone()
            return None if row is None else _event(row)

        return await self._run(job)

    async def last_event_id(self) -> int:
        """The newest event's id (0 for none): a mark to read what happens from now on."""

        def job(conn: sqlite3.Connection) -> int:
            row = conn.execute("SELECT COALESCE(MAX(id), 0) FROM events").fetchone()
            return int(row[0])

        return await self._run(job)


def _nothing(conn: sqlite3.Connection) -> None:
    return None

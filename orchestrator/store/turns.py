"""Turn records: a turn is ``running`` from ``begin_turn`` to ``end_turn``; one left running by a
process that died is marked ``interrupted`` when the store is next opened (in any process)."""

from __future__ import annotations

import os
import socket
import sqlite3
from typing import Any

from orchestrator.base.processes import pid_alive
from orchestrator.store.jobs import StoreJobs, new_id, require_conversation, transaction
from orchestrator.store.records import StoreError, Turn, TurnStatus, utc_now

__all__ = ["FINAL_STATUSES", "Turns", "finish_turn"]

FINAL_STATUSES = {"end_turn", "error", "interrupted", "max_steps", "cancelled", "limit"}


def _turn(row: tuple[Any, ...]) -> Turn:
    return Turn(
        id=row[0], conversation_id=row[1], started_at=row[2], ended_at=row[3], status=row[4], error=row[5]
    )


class Turns(StoreJobs):
    """Mixed into ``Store``: the ``turns`` table."""

    async def begin_turn(self, conversation_id: str) -> str:
        """Record a turn as ``running``; if the process dies before ``end_turn``, the next ``open``
        (in any process) marks it ``interrupted``."""

        def job(conn: sqlite3.Connection) -> str:
            turn_id = new_id("turn")
            require_conversation(conn, conversation_id)
            conn.execute(
                "INSERT INTO turns(id, conversation_id, started_at, status, owner_host, owner_pid) "
                "VALUES (?, ?, ?, 'running', ?, ?)",
                (turn_id, conversation_id, utc_now(), socket.gethostname(), os.getpid()),
            )
            return turn_id

        return await self._write(job)

    async def end_turn(self, turn_id: str, status: TurnStatus, error: str | None = None) -> None:
        if status not in FINAL_STATUSES:
            raise StoreError(f"end_turn: status must be one of {sorted(FINAL_STATUSES)}, not {status!r}")

        await self._write(lambda conn: finish_turn(conn, turn_id, status, error))

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
            with transaction(conn):
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


def finish_turn(conn: sqlite3.Connection, turn_id: str, status: str, error: str | None) -> None:
    """The turn's final record (the caller owns the transaction and checked ``status``)."""
    cur = conn.execute(
        "UPDATE turns SET status = ?, error = ?, ended_at = ? WHERE id = ?",
        (status, error, utc_now(), turn_id),
    )
    if cur.rowcount == 0:
        raise StoreError(f"unknown turn {turn_id!r}")

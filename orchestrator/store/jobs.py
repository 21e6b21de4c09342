"""What every part of the store shares: the base class that hands a job to the connection worker, the
one transaction shape (``BEGIN IMMEDIATE``, rollback on any exception, so a crash leaves all of a
job's rows or none), JSON encoding, ids and the crash-test hook. Each concept module (conversations,
transcript, prompts, reminder queue, events, turns, search, reflections) is a mixin over ``StoreJobs``
and ``Store`` combines them behind one facade."""

from __future__ import annotations

import json
import os
import sqlite3
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any, TypeVar

from orchestrator.store.records import StoreError
from orchestrator.store.worker import ConnectionWorker

__all__ = ["StoreJobs", "dumps", "fault", "new_id", "require_conversation", "transaction"]

T = TypeVar("T")


class StoreJobs:
    """The one way a store method reaches SQLite: ``await self._run(job)`` with ``job(conn)`` run in the
    connection worker (see ``worker``)."""

    _worker: ConnectionWorker

    async def _run(self, fn: Callable[[sqlite3.Connection], T]) -> T:
        return await self._worker.run(fn)


def new_id(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex}"


def fault(step: str) -> None:
    """Crash-test hook (DECISIONS S29): ``REVERIE_FAULT=<step>`` kills the process at that step."""
    if os.environ.get("REVERIE_FAULT") == step:
        os._exit(91)


@contextmanager
def transaction(conn: sqlite3.Connection) -> Iterator[None]:
    conn.execute("BEGIN IMMEDIATE")
    try:
        yield
    except BaseException:
        conn.execute("ROLLBACK")
        raise
    conn.execute("COMMIT")


def dumps(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False, sort_keys=False)


def require_conversation(conn: sqlite3.Connection, conversation_id: str) -> None:
    if conn.execute("SELECT 1 FROM conversations WHERE id = ?", (conversation_id,)).fetchone() is None:
        raise StoreError(f"unknown conversation {conversation_id!r}")

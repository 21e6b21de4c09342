"""The conversation store facade: one ``Store`` combining a mixin per concept, every method one job on
the connection worker, every job that writes more than one row one ``BEGIN IMMEDIATE`` transaction.

Where each table lives: agents and conversations in ``conversations``; the transcript and in-context
list in ``transcript``; the compiled prompt row in ``prompts``; reminders in ``reminder_queue``;
``events``; ``turns``; ``search``; reflection bookkeeping in ``reflections``. What spans concepts stays
here: opening (migration, interrupted-turn recovery) and compaction's commit point. See the package
docstring for the call sequence of a turn."""

from __future__ import annotations

import sqlite3
from collections import deque
from collections.abc import AsyncIterator, Mapping, Sequence
from contextlib import asynccontextmanager
from functools import partial
from pathlib import Path
from typing import Any

import anyio

from orchestrator.base.paths import store_path
from orchestrator.models.types import Message
from orchestrator.store.conversations import Conversations
from orchestrator.store.events import Events
from orchestrator.store.prompts import Prompts, write_prompt
from orchestrator.store.records import PromptRecord, StoredMessage, StoreError
from orchestrator.store.reflections import ReflectionRecords
from orchestrator.store.reminder_queue import REMINDER_QUEUE_LIMIT, ReminderQueue, rearm_keys
from orchestrator.store.schema import batch_store, configure_connection, seed_store
from orchestrator.store.search import LIKE_SCAN_MESSAGES, Search
from orchestrator.store.transcript import ContextCache, Transcript, insert_messages
from orchestrator.store.turn_jobs import TurnJobs
from orchestrator.store.turns import Turns
from orchestrator.store.worker import ConnectionWorker, WorkerClosedError

__all__ = ["LIKE_SCAN_MESSAGES", "REMINDER_QUEUE_LIMIT", "Store"]


def _create(target: Path, *, batch: bool) -> bool:
    """In the connection's lane, before connecting: the folder, and a new file seeded migrated."""
    try:
        target.parent.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise StoreError(f"conversation store {target}: cannot create {target.parent}: {exc.strerror or exc}") from None
    return seed_store(target, batch=batch)


class Store(
    Conversations, Transcript, Prompts, ReminderQueue, Events, Turns, TurnJobs, Search, ReflectionRecords
):
    """Async access to one SQLite conversation store. Create with ``await Store.open(path)`` or
    ``async with Store.opened(path) as store``; several processes may open the same file (WAL)."""

    def __init__(self, worker: ConnectionWorker, path: Path) -> None:
        self._worker = worker
        self._event_listeners = []
        self._staged = []
        self._unannounced = deque()
        self._views = {}
        self._context = ContextCache()
        self.path = path

    # -- lifecycle -----------------------------------------------------------------------------------

    @classmethod
    async def open(cls, path: Path | str | None = None) -> Store:
        """Open (creating and migrating if needed) and mark turns left ``running`` by a dead process as
        ``interrupted``. ``path`` defaults to ``orchestrator.base.paths.store_path()``."""
        target = Path(path) if path is not None else store_path()
        batch = batch_store()  # here, in the opener's context (its Home), not in the lane
        worker = ConnectionWorker(target, partial(configure_connection, batch=batch), partial(_create, batch=batch))
        try:
            await worker.start()
        except (sqlite3.DatabaseError, OSError) as exc:
            raise StoreError(f"conversation store {target}: not usable ({exc})") from None
        store = cls(worker, target)
        if worker.created:
            return store  # written just now from the empty template: no turn of a dead process in it
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

    @property
    def jobs(self) -> int:
        """SQLite jobs this store has made so far, each a round trip to its lane (bench/turn.py)."""
        return self._worker.jobs

    async def close(self) -> None:
        """Commit the events still staged, then close the connection (idempotent)."""
        with anyio.CancelScope(shield=True):
            try:
                await self.flush_events()
            except (WorkerClosedError, sqlite3.Error):
                pass
            finally:
                await self._worker.close()

    # -- compaction's commit point ---------------------------------------------------------------------

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
        recompiled prompt and re-arm one-shot reminders (TURN-7.5 item 4). Every id in
        ``keep_ids`` must be in context now; otherwise nothing changes and ``StoreError`` says which."""
        keep = list(keep_ids)

        def job(conn: sqlite3.Connection) -> StoredMessage:
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
            summary = insert_messages(
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
                write_prompt(conn, prompt)
            rearm_keys(conn, conversation_id, rearm)
            return summary

        summary = await self._write(job, after=lambda _: self._context.forget(conversation_id))
        view = self._views.get(conversation_id)
        if view is not None:
            view.context = None
            if prompt is not None:
                view.prompt, view.prompt_known = prompt, True
        return summary

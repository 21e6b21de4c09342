"""A turn's store work in as few jobs as its contracts allow (TURN-1.2; P3's lean turn).

A plain chat turn used to make about seventeen trips to the SQLite lane: the last-message time, the
in-context list (three times), the turn row, the agent-info reminder, the delivery, the prompt row,
the ``first_sent_at`` mark, the reply, the end, the sync reminder and three events. Now it makes three:

* ``open_turn``, one transaction, before the model is asked anything: answer a tool call a killed
  turn left dangling, record the turn as ``running``, queue the one-shot agent-info reminder, deliver
  the pending reminders with the user's message (T2, S15) and read the prompt row. So the user's
  message is durable before the first request, as before, and a crash leaves either all of it or
  none (before, a turn row without its message). The in-context list and prompt row it returns open
  the conversation's ``TurnView``: the turn's later reads are served from memory (see ``jobs``).
* the reply (``append_message``), which carries the staged ``model.call`` event;
* ``close_turn``, one transaction after the post-turn sync: the turn's final status, the sync
  reminder queued or cleared (4.7) and the staged ``turn.ended`` event. A process killed before it
  leaves the turn ``running``, which the next ``Store.open`` marks ``interrupted``, as for any turn
  cut short; a reminder decided by a sync that did not commit is decided again after the next turn.
"""

from __future__ import annotations

import os
import socket
import sqlite3
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from orchestrator.models.types import Message
from orchestrator.store.conversations import last_message_time
from orchestrator.store.jobs import StoreJobs, TurnView, new_id, require_conversation, staged_event
from orchestrator.store.prompts import read_prompt
from orchestrator.store.records import StoredMessage, StoreError, TurnStatus, utc_now
from orchestrator.store.reminder_queue import cancel, deliver, enqueue, sent_flag
from orchestrator.store.transcript import ContextCache, insert_messages, read_in_context
from orchestrator.store.turns import FINAL_STATUSES, finish_turn

__all__ = ["AgentInfo", "OpenedTurn", "Settle", "SyncReminder", "TurnJobs", "new_turn_id"]

AgentInfo = Callable[[str | None], str]
"""The agent-info text, given when the agent last recorded a message (before this turn wrote)."""
Settle = Callable[[Sequence[StoredMessage]], Sequence[Message]]
"""The results answering the tool calls left without one in the given in-context list."""


@dataclass(frozen=True)
class OpenedTurn:
    """What ``open_turn`` wrote in its one transaction."""

    turn_id: str
    delivered: tuple[StoredMessage, ...]
    """The reminder message (if any was pending) and the user's message, in order."""
    settled: tuple[StoredMessage, ...] = ()
    """Error results written for tool calls a killed turn left without one."""


@dataclass(frozen=True)
class SyncReminder:
    """What the post-turn sync decided for its reminder: queue ``text`` under ``key``, or clear the
    pending one when ``text`` is None."""

    key: str
    text: str | None
    priority: int = 50


def new_turn_id() -> str:
    return new_id("turn")


class TurnJobs(StoreJobs):
    """Mixed into ``Store``: the turn loop's composite writes (module docstring)."""

    _context: ContextCache

    async def open_turn(
        self,
        conversation_id: str,
        user_message: Message,
        *,
        agent_id: str,
        turn_id: str | None = None,
        agent_info: AgentInfo | None = None,
        agent_info_key: str = "agent-info",
        settle: Settle | None = None,
        events: Sequence[tuple[str, Mapping[str, Any]]] = (),
        user_metadata: Mapping[str, Any] | None = None,
    ) -> OpenedTurn:
        """Start a turn in one transaction (module docstring) and open its ``TurnView``; ``events``
        (``turn.started``: kind and payload, recorded for the agent and conversation) are committed
        with it, after those staged before. ``user_metadata`` is stored with the user's message (a
        replayed message's ``created_at``). ``close_turn`` must follow, whatever happens."""
        tid = turn_id or new_turn_id()
        host, pid = socket.gethostname(), os.getpid()

        def job(conn: sqlite3.Connection) -> tuple[list[StoredMessage], list[StoredMessage], list[StoredMessage], TurnView]:
            require_conversation(conn, conversation_id)
            info = agent_info is not None and not sent_flag(conn, conversation_id, agent_info_key)
            last = last_message_time(conn, agent_id) if info else None
            history = read_in_context(conn, self._context, conversation_id)
            answers = list(settle(history)) if settle is not None else []
            settled = (
                insert_messages(conn, conversation_id, [(m, {"ok": False, "settled": True}) for m in answers], None)
                if answers
                else []
            )
            conn.execute(
                "INSERT INTO turns(id, conversation_id, started_at, status, owner_host, owner_pid) "
                "VALUES (?, ?, ?, 'running', ?, ?)",
                (tid, conversation_id, utc_now(), host, pid),
            )
            if info and agent_info is not None:
                enqueue(conn, conversation_id, agent_info_key, agent_info(last), priority=0, once=True)
            delivered = deliver(conn, conversation_id, [(user_message, dict(user_metadata or {}))], tid)
            view = TurnView([*history, *settled, *delivered], read_prompt(conn, conversation_id), True)
            return history, settled, delivered, view

        def after(result: tuple[list[StoredMessage], list[StoredMessage], list[StoredMessage], TurnView]) -> None:
            self._context.appended(conversation_id, [*result[1], *result[2]])

        extra = [staged_event(kind, payload, agent_id, conversation_id) for kind, payload in events]
        _, settled, delivered, view = await self._write(job, after, events=extra)
        self._views[conversation_id] = view
        return OpenedTurn(tid, tuple(delivered), tuple(settled))

    async def close_turn(
        self,
        turn_id: str,
        status: TurnStatus,
        error: str | None = None,
        *,
        conversation_id: str,
        agent_id: str | None = None,
        reminder: SyncReminder | None = None,
        events: Sequence[tuple[str, Mapping[str, Any]]] = (),
    ) -> None:
        """End the turn (``end_turn``'s record), apply the sync's reminder decision and commit the
        staged events and then ``events`` (``turn.ended``), in one transaction; the conversation's
        ``TurnView`` closes even if it fails."""
        if status not in FINAL_STATUSES:
            self._views.pop(conversation_id, None)
            raise StoreError(f"close_turn: status must be one of {sorted(FINAL_STATUSES)}, not {status!r}")

        def job(conn: sqlite3.Connection) -> None:
            finish_turn(conn, turn_id, status, error)
            if reminder is not None:
                if reminder.text is None:
                    cancel(conn, conversation_id, reminder.key)
                else:
                    enqueue(conn, conversation_id, reminder.key, reminder.text, priority=reminder.priority, once=False)

        extra = [staged_event(kind, payload, agent_id, conversation_id) for kind, payload in events]
        try:
            await self._write(job, events=extra)
        finally:
            self._views.pop(conversation_id, None)

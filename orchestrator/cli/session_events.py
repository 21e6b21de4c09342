"""``reverie events --agent A``: a chat session's events from the store, as ``reverie events RUN_DIR``
prints a batch run's event log (one command, both sources).

The store records every event a session publishes (turns, model calls, tools, memory commits,
compactions and every reflection outcome, ``no_changes`` included), so a second terminal can follow
a running session by reading the table. Following polls the store every ``poll`` seconds with
``after_id``: SQLite tells no other process of a commit, and a quarter second is below what a
person notices while a full read of new rows costs one indexed query. Lines are printed and
flushed one by one so a pipe (``| grep``, a test) sees each event when it is read.

Human lines reuse the run log's format with the conversation in the task's column; ``--json``
prints the store's row as it is (``id``, ``at``, ``kind``, ``agent_id``, ``conversation_id``,
``payload``; docs/events.md).
"""

from __future__ import annotations

import json
import sys
from collections.abc import Callable, Sequence

import anyio

from orchestrator.batch.eventlog import EventRecord, format_record
from orchestrator.cli.aio import run_async
from orchestrator.cli.errors import UserError
from orchestrator.store import Store
from orchestrator.store.records import Event

__all__ = ["session_events", "show_session_events"]

_PAGE = 1000


def _line(event: Event, as_json: bool) -> str:
    if as_json:
        row = {
            "id": event.id,
            "at": event.at,
            "kind": event.kind,
            "agent_id": event.agent_id,
            "conversation_id": event.conversation_id,
            "payload": event.payload,
        }
        return json.dumps(row, ensure_ascii=False, default=str)
    record = EventRecord(
        seq=event.id,
        at=event.at,
        task=event.conversation_id or "-",
        kind=event.kind,
        payload=event.payload,
        agent_id=event.agent_id,
        conversation_id=event.conversation_id,
    )
    return format_record(record)


async def session_events(
    agent_id: str,
    *,
    conversation_id: str | None = None,
    kinds: Sequence[str] = (),
    follow: bool = False,
    as_json: bool = False,
    poll: float = 0.25,
    say: Callable[[str], None] = lambda line: print(line, flush=True),
    store: Store | None = None,
) -> int:
    """Print the agent's events oldest first (and, with ``follow``, new ones until cancelled);
    returns how many were printed. A mistaken agent or conversation is a ``UserError`` naming it."""
    if store is None:
        async with Store.opened() as opened:
            return await session_events(
                agent_id, conversation_id=conversation_id, kinds=kinds, follow=follow, as_json=as_json,
                poll=poll, say=say, store=opened,
            )  # fmt: skip
    await _check(store, agent_id, conversation_id)
    last, shown = 0, 0
    while True:
        batch = await store.events(
            agent_id=agent_id, conversation_id=conversation_id, kinds=list(kinds) or None, after_id=last, limit=_PAGE
        )
        for event in batch:
            say(_line(event, as_json))
            last = event.id
        shown += len(batch)
        if len(batch) == _PAGE:
            continue
        if not follow:
            return shown
        await anyio.sleep(poll)


async def _check(store: Store, agent_id: str, conversation_id: str | None) -> None:
    if await store.get_agent(agent_id) is None:
        known = sorted(a.id for a in await store.list_agents())
        listing = f" (agents: {', '.join(known)})" if known else " (no agents yet: `reverie chat` creates one)"
        raise UserError(f"no agent {agent_id!r} in this home's store{listing}")
    if conversation_id is None:
        return
    conversation = await store.get_conversation(conversation_id)
    if conversation is None or conversation.agent_id != agent_id:
        raise UserError(f"no conversation {conversation_id!r} of agent {agent_id!r} (`reverie history --list` lists them)")


def show_session_events(
    agent_id: str, conversation_id: str | None, kinds: Sequence[str], follow: bool, as_json: bool
) -> None:
    """The command: prints, and says on stderr when a kind filter matched nothing."""

    shown = run_async(
        lambda: session_events(agent_id, conversation_id=conversation_id, kinds=kinds, follow=follow, as_json=as_json)
    )
    if kinds and not shown:
        _stderr(f"no events of kind {', '.join(kinds)} for agent {agent_id!r}")


def _stderr(line: str) -> None:
    print(line, file=sys.stderr)

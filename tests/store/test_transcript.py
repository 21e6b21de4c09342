"""The durable transcript and the in-context list. Real SQLite files, on trio and asyncio."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import anyio
import pytest

from orchestrator.models.types import Message, ToolCall
from orchestrator.store import PromptRecord, Store, StoreError
from tests.store.support import open_with_conversation

pytestmark = pytest.mark.anyio


async def test_append_in_context_and_transcript(tmp_path: Path) -> None:
    store, conv = await open_with_conversation(tmp_path)
    try:
        call = ToolCall(id="c1", name="bash", arguments='{"command": "ls"}')
        msgs = [
            Message(role="user", content="hello"),
            Message(role="assistant", content="", tool_calls=(call,)),
            Message(role="tool", content="a.txt", tool_call_id="c1", name="bash"),
        ]
        stored = await store.append_messages(conv, msgs, metadata={"source": "test"})
        assert [s.message for s in stored] == msgs
        assert [s.message for s in await store.in_context(conv)] == msgs
        transcript = await store.transcript(conv)
        assert [s.id for s in transcript] == [s.id for s in stored]
        assert transcript[1].message.tool_calls == (call,)
        assert transcript[0].metadata == {"source": "test"}
        assert [s.id for s in await store.transcript(conv, since_seq=stored[0].seq)] == [
            s.id for s in stored[1:]
        ]
        with pytest.raises(StoreError, match="unknown conversation"):
            await store.append_message("nope", Message(role="user", content="x"))
    finally:
        await store.close()


async def test_failed_transaction_leaves_nothing(tmp_path: Path) -> None:
    store, conv = await open_with_conversation(tmp_path)
    try:
        bad_prompt = PromptRecord(conv, "no-such-agent", "sys", "core", "t", "h")
        with pytest.raises(sqlite3.IntegrityError):
            await store.append_messages(
                conv,
                [Message(role="user", content="needle one"), Message(role="user", content="needle two")],
                prompt=bad_prompt,
            )
        assert await store.transcript(conv) == []
        assert await store.in_context(conv) == []
        assert await store.search("needle", agent_id="a1") == []
        assert await store.get_prompt(conv) is None
        ok = await store.append_message(conv, Message(role="user", content="after"))
        assert [s.id for s in await store.in_context(conv)] == [ok.id]
    finally:
        await store.close()


async def test_concurrent_appends_keep_order_consistent(tmp_path: Path) -> None:
    store, conv = await open_with_conversation(tmp_path)
    try:
        async with anyio.create_task_group() as tg:
            for i in range(40):
                tg.start_soon(store.append_message, conv, Message(role="user", content=f"n{i}"))
        in_ctx = await store.in_context(conv)
        assert len(in_ctx) == 40
        assert [m.seq for m in in_ctx] == sorted(m.seq for m in in_ctx)
        assert {m.message.content for m in in_ctx} == {f"n{i}" for i in range(40)}
    finally:
        await store.close()


async def test_in_context_stays_exact_across_own_writes_other_connections_and_failed_writes(tmp_path: Path) -> None:
    store, conv = await open_with_conversation(tmp_path)
    other = await Store.open(tmp_path / "s.sqlite3")
    try:
        first = await store.append_message(conv, Message(role="user", content="one"))
        assert [m.id for m in await store.in_context(conv)] == [first.id]  # read once: now remembered
        second = await store.append_message(conv, Message(role="assistant", content="two"))
        from_other = await other.append_message(conv, Message(role="user", content="three"))
        bad = PromptRecord(conv, "no-such-agent", "sys", "core", "t", "h")
        with pytest.raises(sqlite3.IntegrityError):
            await store.append_message(conv, Message(role="user", content="rolled back"), prompt=bad)
        delivered = await store.deliver_reminders(conv, followed_by=[Message(role="user", content="four")])
        expected = [first.id, second.id, from_other.id, delivered[0].id]
        assert [m.id for m in await store.in_context(conv)] == expected
        assert [m.id for m in await other.in_context(conv)] == expected
        summary = await store.replace_in_context(
            conv, Message(role="user", content="summary", kind="summary"), [delivered[0].id]
        )
        assert [m.id for m in await store.in_context(conv)] == [summary.id, delivered[0].id]
        assert [m.id for m in await other.in_context(conv)] == [summary.id, delivered[0].id]
        got = await store.in_context(conv)
        got.clear()  # a caller's list is its own
        assert len(await store.in_context(conv)) == 2
    finally:
        await other.close()
        await store.close()

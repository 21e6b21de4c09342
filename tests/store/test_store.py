"""The conversation store against a real SQLite file, on trio and asyncio."""

from __future__ import annotations

import os
import sqlite3
import subprocess
import sys
import textwrap
from functools import partial
from pathlib import Path

import anyio
import anyio.lowlevel
import pytest

from orchestrator.models.types import Message, ToolCall
from orchestrator.store import PromptRecord, Store, StoreError
from orchestrator.store.schema import SCHEMA_VERSION

pytestmark = pytest.mark.anyio


async def _setup(tmp_path: Path) -> tuple[Store, str]:
    store = await Store.open(tmp_path / "s.sqlite3")
    await store.ensure_agent("a1", name="Ada")
    conv = await store.create_conversation("a1")
    return store, conv.id


def _pragma(path: Path, name: str) -> object:
    conn = sqlite3.connect(path)
    try:
        return conn.execute(f"PRAGMA {name}").fetchone()[0]
    finally:
        conn.close()


async def test_open_creates_schema_in_wal(tmp_path: Path) -> None:
    path = tmp_path / "deep" / "s.sqlite3"
    async with Store.opened(path) as store:
        assert await store.get_agent("nobody") is None
    assert await anyio.to_thread.run_sync(_pragma, path, "user_version") == SCHEMA_VERSION
    assert await anyio.to_thread.run_sync(_pragma, path, "journal_mode") == "wal"
    async with Store.opened(path) as store:  # reopening does not re-run migrations
        assert await store.list_agents() == []


async def test_agents_and_conversations(tmp_path: Path) -> None:
    store, conv_id = await _setup(tmp_path)
    try:
        again = await store.ensure_agent("a1", name="ignored", settings={"model": "x"})
        assert again.name == "Ada" and again.settings == {}
        updated = await store.update_agent("a1", settings={"model": "m", "reflection_trigger": "step-count"})
        assert updated.settings == {"model": "m", "reflection_trigger": "step-count"}
        assert (await store.update_agent("a1", settings={"model": None})).settings == {
            "reflection_trigger": "step-count"
        }
        second = await store.create_conversation("a1", title="two")
        assert (await store.latest_conversation("a1")) == second
        await store.append_message(conv_id, Message(role="user", content="hi"))
        latest = await store.latest_conversation("a1")
        assert latest is not None and latest.id == conv_id
        assert [c.id for c in await store.list_conversations("a1")] == [conv_id, second.id]
        with pytest.raises(StoreError, match="unknown agent 'zz'"):
            await store.create_conversation("zz")
        with pytest.raises(StoreError, match="already exists"):
            await store.create_conversation("a1", conversation_id=conv_id)
    finally:
        await store.close()


async def test_append_in_context_and_transcript(tmp_path: Path) -> None:
    store, conv = await _setup(tmp_path)
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
    store, conv = await _setup(tmp_path)
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


async def test_replace_in_context(tmp_path: Path) -> None:
    store, conv = await _setup(tmp_path)
    try:
        stored = await store.append_messages(conv, [Message(role="user", content=f"m{i}") for i in range(5)])
        await store.mark_sent(conv, "agent-info")
        prompt = PromptRecord(conv, "a1", "recompiled", "core", "t", "h", memfs_revision="r2")
        summary = await store.replace_in_context(
            conv,
            Message(role="user", content="Note: 3 messages ...", kind="summary"),
            [stored[4].id, stored[3].id],
            metadata={"compaction": {"summary": "raw summary text", "stats": {"trigger": "manual"}}},
            prompt=prompt,
            rearm=["agent-info"],
        )
        ids = [s.id for s in await store.in_context(conv)]
        assert ids == [summary.id, stored[3].id, stored[4].id]
        assert len(await store.transcript(conv)) == 6
        assert await store.get_prompt(conv) == prompt
        assert not await store.was_sent(conv, "agent-info")
        with pytest.raises(StoreError, match="not in the context"):
            await store.replace_in_context(
                conv, Message(role="user", content="s", kind="summary"), [stored[0].id]
            )
        assert [s.id for s in await store.in_context(conv)] == ids
    finally:
        await store.close()


async def test_prompt_cache(tmp_path: Path) -> None:
    store, conv = await _setup(tmp_path)
    try:
        assert await store.get_prompt(conv) is None
        record = PromptRecord(conv, "a1", "system", "core", "2026-01-01T00:00:00.000Z", "hash", "rev1", "v2")
        await store.set_prompt(record)
        assert await store.get_prompt(conv) == record
        await store.mark_prompt_sent(conv)
        sent = await store.get_prompt(conv)
        assert sent is not None and sent.first_sent_at is not None
        await store.mark_prompt_sent(conv)
        assert await store.get_prompt(conv) == sent
        moved = PromptRecord(
            conv, "a1", "system", "core2", "t2", "hash", "rev2", "v2", sent.first_sent_at, "rev1"
        )
        update = Message(role="user", content="<system-reminder>...", kind="memory_update")
        stored = await store.append_message(
            conv, update, metadata={"memfs_revision": "rev2", "previous_memfs_revision": "rev1"}, prompt=moved
        )
        assert await store.get_prompt(conv) == moved
        assert stored.metadata["previous_memfs_revision"] == "rev1"
    finally:
        await store.close()


async def test_reminders_dedup_once_per_turn_and_survive_reopen(tmp_path: Path) -> None:
    path = tmp_path / "s.sqlite3"
    store, conv = await _setup(tmp_path)
    for _ in range(3):  # three post-turn syncs with no turn in between: one copy
        await store.enqueue_reminder(conv, "memory-git-sync", "MEMORY COMMIT NEEDED v", priority=50)
    await store.enqueue_reminder(conv, "agent-info", "INFO", priority=0, once=True)
    await store.close()

    store = await Store.open(path)
    try:
        assert [r.key for r in await store.pending_reminders(conv)] == ["agent-info", "memory-git-sync"]
        delivered = await store.deliver_reminders(conv, followed_by=[Message(role="user", content="hi")])
        assert [m.message.kind for m in delivered] == ["reminder", "message"]
        assert delivered[0].message.content == "INFO\n\nMEMORY COMMIT NEEDED v"
        assert delivered[0].metadata == {"reminder_keys": ["agent-info", "memory-git-sync"]}
        assert await store.pending_reminders(conv) == []
        assert await store.was_sent(conv, "agent-info")
        assert not await store.enqueue_reminder(conv, "agent-info", "INFO", once=True)
        # next turn: still dirty, queued again, delivered again, exactly once
        await store.enqueue_reminder(conv, "memory-git-sync", "MEMORY COMMIT NEEDED v", priority=50)
        second = await store.deliver_reminders(conv, followed_by=[Message(role="user", content="again")])
        assert second[0].message.content == "MEMORY COMMIT NEEDED v"
        nothing = await store.deliver_reminders(conv, followed_by=[Message(role="user", content="third")])
        assert [m.message.kind for m in nothing] == ["message"]
        await store.rearm(conv, "agent-info")
        assert await store.enqueue_reminder(conv, "agent-info", "INFO", once=True)
        assert await store.cancel_reminder(conv, "agent-info")
        assert await store.pending_reminders(conv) == []
    finally:
        await store.close()
    async with Store.opened(path) as store:
        assert not await store.was_sent(conv, "agent-info")
        await store.mark_sent(conv, "agent-info")
    async with Store.opened(path) as store:
        assert await store.was_sent(conv, "agent-info")


async def test_reminder_queue_is_bounded(tmp_path: Path) -> None:
    store, conv = await _setup(tmp_path)
    try:
        for i in range(30):
            await store.enqueue_reminder(conv, f"k{i}", f"t{i}")
        pending = await store.pending_reminders(conv)
        assert [p.key for p in pending] == [f"k{i}" for i in range(5, 30)]
    finally:
        await store.close()


async def test_events(tmp_path: Path) -> None:
    store, conv = await _setup(tmp_path)
    try:
        first = await store.record_event(
            "compaction.started", {"trigger": "auto"}, agent_id="a1", conversation_id=conv
        )
        await store.record_event("reflection.launched", {"branch": "b"}, agent_id="a1")
        await store.record_event("other", agent_id="a2")
        assert [e.kind for e in await store.events(agent_id="a1")] == [
            "compaction.started",
            "reflection.launched",
        ]
        got = await store.events(conversation_id=conv)
        assert got == [first] and got[0].payload == {"trigger": "auto"}
        assert [e.kind for e in await store.events(after_id=first.id, kinds=["other"])] == ["other"]
    finally:
        await store.close()


async def test_turn_status(tmp_path: Path) -> None:
    store, conv = await _setup(tmp_path)
    try:
        turn = await store.begin_turn(conv)
        assert (await store.recover_interrupted_turns()) == []  # our own process is alive
        await store.end_turn(turn, "end_turn")
        t = await store.get_turn(turn)
        assert t is not None and t.status == "end_turn" and t.ended_at is not None
        with pytest.raises(StoreError, match="status must be"):
            await store.end_turn(turn, "running")
    finally:
        await store.close()


_CRASHER = textwrap.dedent(
    """
    import sys, anyio
    from orchestrator.models.types import Message
    from orchestrator.store import Store

    async def main(path, conv):
        store = await Store.open(path)
        turn = await store.begin_turn(conv)
        print(turn, flush=True)
        await store.append_messages(conv, [Message(role="user", content="lost one"), Message(role="user", content="lost two")], turn_id=turn)

    anyio.run(main, sys.argv[1], sys.argv[2])
    """
)


async def test_crash_mid_transaction_then_reopen(tmp_path: Path) -> None:
    path = tmp_path / "s.sqlite3"
    store, conv = await _setup(tmp_path)
    kept = await store.append_message(conv, Message(role="user", content="kept"))
    await store.close()
    env = {**os.environ, "REVERIE_FAULT": "store.append.before_in_context"}
    # A plain thread, not anyio.run_process: the conftest guard rejects asyncio's Popen on the loop.
    run = partial(
        subprocess.run,
        [sys.executable, "-c", _CRASHER, str(path), conv],
        env=env,
        capture_output=True,
        text=True,
        cwd=Path(__file__).parents[2],
    )
    result = await anyio.to_thread.run_sync(run)
    assert result.returncode == 91, result.stderr
    turn_id = result.stdout.strip()
    async with Store.opened(path) as store:
        assert [m.id for m in await store.transcript(conv)] == [kept.id]
        assert [m.id for m in await store.in_context(conv)] == [kept.id]
        assert await store.search("lost", agent_id="a1") == []
        turn = await store.get_turn(turn_id)
        assert turn is not None and turn.status == "interrupted"


async def test_cancelled_caller_still_commits(tmp_path: Path) -> None:
    store, conv = await _setup(tmp_path)
    try:
        with anyio.CancelScope() as scope:
            scope.cancel()
            stored = await store.append_message(conv, Message(role="user", content="written anyway"))
            assert stored.message.content == "written anyway"  # the result still arrives
            await anyio.lowlevel.checkpoint()
            pytest.fail("cancellation should be delivered at the next checkpoint")
        assert scope.cancelled_caught
        assert [m.message.content for m in await store.in_context(conv)] == ["written anyway"]
    finally:
        await store.close()


async def test_concurrent_appends_keep_order_consistent(tmp_path: Path) -> None:
    store, conv = await _setup(tmp_path)
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


async def test_two_stores_share_one_file(tmp_path: Path) -> None:
    path = tmp_path / "s.sqlite3"
    store, conv = await _setup(tmp_path)
    other = await Store.open(path)
    try:
        async with anyio.create_task_group() as tg:
            for i in range(10):
                tg.start_soon(store.append_message, conv, Message(role="user", content=f"a{i}"))
                tg.start_soon(other.append_message, conv, Message(role="user", content=f"b{i}"))
        assert len(await other.in_context(conv)) == 20
    finally:
        await other.close()
        await store.close()


async def test_closed_store_refuses_work(tmp_path: Path) -> None:
    store, _ = await _setup(tmp_path)
    await store.close()
    await store.close()
    with pytest.raises(RuntimeError, match="closed"):
        await store.list_agents()

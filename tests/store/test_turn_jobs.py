"""The turn's composite writes (open_turn, close_turn), staged events and the open turn's view, on
real SQLite: what is committed together, what a failure or a crash leaves, and what is read from
memory instead of the lane."""

from __future__ import annotations

import os
import signal
import sys
from pathlib import Path

import anyio
import pytest

from orchestrator.models.types import Message, ToolCall
from orchestrator.store import Event, PromptRecord, Store, StoreError, SyncReminder
from tests.store.support import open_with_conversation

pytestmark = pytest.mark.anyio


def _info(last: str | None) -> str:
    return f"agent info, last {last}"


async def test_open_turn_commits_turn_reminders_and_message_together(tmp_path: Path) -> None:
    store, conv = await open_with_conversation(tmp_path)
    await store.enqueue_reminder(conv, "memory-git-sync", "commit please", priority=50)
    opened = await store.open_turn(
        conv, Message("user", "hi"), agent_id="a1", agent_info=_info, events=[("turn.started", {"n": 1})]
    )
    await store.close_turn(opened.turn_id, "end_turn", conversation_id=conv)
    await store.close()
    async with Store.opened(tmp_path / "s.sqlite3") as fresh:
        messages = await fresh.transcript(conv)
        assert [(m.message.kind, m.message.content) for m in messages] == [
            ("reminder", "agent info, last None\n\ncommit please"),
            ("message", "hi"),
        ]
        assert [m.turn_id for m in messages] == [opened.turn_id] * 2
        assert [m.id for m in opened.delivered] == [m.id for m in messages]
        assert await fresh.pending_reminders(conv) == []
        assert await fresh.was_sent(conv, "agent-info")
        [turn] = await fresh.turns(conv)
        assert (turn.id, turn.status) == (opened.turn_id, "end_turn")
        assert [(e.kind, e.agent_id, e.conversation_id) for e in await fresh.events()] == [
            ("turn.started", "a1", conv)
        ]


async def test_open_turn_answers_a_dangling_tool_call_before_the_turn(tmp_path: Path) -> None:
    store, conv = await open_with_conversation(tmp_path)
    await store.append_message(conv, Message("assistant", "", tool_calls=(ToolCall("t1", "bash", "{}"),)))

    def settle(history: object) -> list[Message]:
        return [Message("tool", "interrupted", tool_call_id="t1", name="bash")]

    opened = await store.open_turn(conv, Message("user", "again"), agent_id="a1", settle=settle)
    await store.close_turn(opened.turn_id, "end_turn", conversation_id=conv)
    context = await store.in_context(conv)
    assert [(m.message.role, m.turn_id) for m in context] == [
        ("assistant", None),
        ("tool", None),
        ("user", opened.turn_id),
    ]
    assert context[1].metadata == {"ok": False, "settled": True}
    await store.close()


async def test_a_failing_open_turn_leaves_nothing_and_keeps_what_was_staged(tmp_path: Path) -> None:
    store, conv = await open_with_conversation(tmp_path)
    store.stage_event("before", {"x": 1})
    with pytest.raises(StoreError):
        await store.open_turn("nope", Message("user", "hi"), agent_id="a1", events=[("turn.started", {})])
    assert await store.events() == []
    assert await store.turns("nope") == [] and await store.transcript(conv) == []
    await store.flush_events()
    assert [e.kind for e in await store.events()] == ["before"], "the turn's own event went with it"
    await store.close()


_CRASH = """
import anyio, sys
from orchestrator.models.types import Message
from orchestrator.store import Store

async def main() -> None:
    store = await Store.open(sys.argv[1])
    store.stage_event("model.call", {})
    await store.open_turn(sys.argv[2], Message("user", "lost?"), agent_id="a1", events=[("turn.started", {})])

anyio.run(main)
"""


async def test_a_crash_inside_open_turn_leaves_no_turn_no_message_no_event(tmp_path: Path) -> None:
    store, conv = await open_with_conversation(tmp_path)
    await store.close()
    env = {**os.environ, "REVERIE_FAULT": "store.append.before_in_context"}
    with anyio.fail_after(60):
        proc = await anyio.run_process(
            [sys.executable, "-c", _CRASH, str(tmp_path / "s.sqlite3"), conv], env=env, check=False
        )
    assert proc.returncode == -signal.SIGKILL, proc.stderr
    async with Store.opened(tmp_path / "s.sqlite3") as fresh:
        assert await fresh.turns(conv) == []
        assert await fresh.transcript(conv) == [] and await fresh.in_context(conv) == []
        assert await fresh.events() == []


async def test_staged_events_ride_the_next_write_in_order(tmp_path: Path) -> None:
    store, conv = await open_with_conversation(tmp_path)
    heard: list[Event] = []
    store.follow_events(heard.append)
    store.stage_event("first", {"n": 1}, conversation_id=conv)
    store.stage_event("second", {"n": 2})
    assert await store.events() == [] and heard == [], "staged, not yet recorded"
    await store.append_message(conv, Message("user", "hello"))
    third = await store.record_event("third")
    recorded = await store.events()
    assert [e.kind for e in recorded] == ["first", "second", "third"]
    assert [e.id for e in heard] == [e.id for e in recorded] and recorded[-1] == third
    assert recorded[0].conversation_id == conv and recorded[1].payload == {"n": 2}
    await store.close()


async def test_a_failed_write_puts_the_staged_events_back(tmp_path: Path) -> None:
    store, conv = await open_with_conversation(tmp_path)
    store.stage_event("kept", {})
    with pytest.raises(StoreError):
        await store.append_message("nope", Message("user", "hello"))
    assert await store.events() == []
    await store.append_message(conv, Message("user", "hello"))
    assert [e.kind for e in await store.events()] == ["kept"]
    await store.close()


async def test_unserialisable_payload_fails_its_caller_not_a_later_write(tmp_path: Path) -> None:
    store, conv = await open_with_conversation(tmp_path)
    with pytest.raises(TypeError):
        store.stage_event("bad", {"x": object()})
    await store.append_message(conv, Message("user", "hello"))
    assert await store.events() == []
    await store.close()


async def test_close_commits_what_is_still_staged(tmp_path: Path) -> None:
    store, _ = await open_with_conversation(tmp_path)
    store.stage_event("last words", {"n": 3})
    await store.close()
    async with Store.opened(tmp_path / "s.sqlite3") as fresh:
        assert [(e.kind, e.payload) for e in await fresh.events()] == [("last words", {"n": 3})]


async def test_an_open_turn_reads_from_memory_what_sqlite_holds(tmp_path: Path) -> None:
    store, conv = await open_with_conversation(tmp_path)
    other = await Store.open(tmp_path / "s.sqlite3")
    await store.set_prompt(_prompt(conv, sent=True))
    opened = await store.open_turn(conv, Message("user", "hi"), agent_id="a1")
    for _ in range(3):
        context = await store.in_context(conv)
        prompt = await store.get_prompt(conv)
        await store.mark_prompt_sent(conv)
    assert [m.id for m in context] == [m.id for m in await other.in_context(conv)]
    assert prompt == await other.get_prompt(conv)
    reply = await store.append_message(conv, Message("assistant", "hello"), turn_id=opened.turn_id)
    assert [m.id for m in await store.in_context(conv)] == [m.id for m in await other.in_context(conv)]
    assert (await store.in_context(conv))[-1] == reply
    await store.close_turn(opened.turn_id, "end_turn", conversation_id=conv)
    await other.append_message(conv, Message("user", "written elsewhere"))
    after = await store.in_context(conv)
    assert after[-1].message.content == "written elsewhere", "the view closed with the turn"
    await other.close()
    await store.close()


async def test_first_request_marks_the_prompt_sent_once(tmp_path: Path) -> None:
    store, conv = await open_with_conversation(tmp_path)
    await store.set_prompt(_prompt(conv, sent=False))
    opened = await store.open_turn(conv, Message("user", "hi"), agent_id="a1")
    await store.mark_prompt_sent(conv)
    first = await store.get_prompt(conv)
    await store.mark_prompt_sent(conv)
    assert first is not None and first.first_sent_at is not None
    assert await store.get_prompt(conv) == first, "marked once: the second mark changes nothing"
    await store.close_turn(opened.turn_id, "end_turn", conversation_id=conv)
    assert await store.get_prompt(conv) == first, "memory and SQLite agree"
    await store.close()


async def test_close_turn_records_status_reminder_and_events_together(tmp_path: Path) -> None:
    store, conv = await open_with_conversation(tmp_path)
    opened = await store.open_turn(conv, Message("user", "hi"), agent_id="a1")
    store.stage_event("model.call", {})
    await store.close_turn(
        opened.turn_id,
        "end_turn",
        conversation_id=conv,
        agent_id="a1",
        reminder=SyncReminder("memory-git-sync", "commit please"),
        events=[("reminder.queued", {}), ("turn.ended", {"status": "end_turn"})],
    )
    assert [r.text for r in await store.pending_reminders(conv)] == ["commit please"]
    assert [e.kind for e in await store.events()] == ["model.call", "reminder.queued", "turn.ended"]
    second = await store.open_turn(conv, Message("user", "again"), agent_id="a1")
    await store.close_turn(
        second.turn_id, "end_turn", conversation_id=conv, reminder=SyncReminder("memory-git-sync", None)
    )
    assert await store.pending_reminders(conv) == []
    with pytest.raises(StoreError):
        await store.close_turn("turn-unknown", "end_turn", conversation_id=conv, events=[("turn.ended", {})])
    assert [e.kind for e in await store.events()][-1] == "turn.ended"
    assert len([e for e in await store.events() if e.kind == "turn.ended"]) == 1
    await store.close()


def _prompt(conv: str, *, sent: bool) -> PromptRecord:
    return PromptRecord(conv, "a1", "system", "core", "t", "h", "r1", "memfs-v2", "t" if sent else None, "r1")



async def test_a_failing_close_turn_still_closes_the_view(tmp_path: Path) -> None:
    store, conv = await open_with_conversation(tmp_path)
    await store.open_turn(conv, Message("user", "hi"), agent_id="a1")
    with pytest.raises(StoreError):
        await store.close_turn("turn-unknown", "end_turn", conversation_id=conv)
    async with Store.opened(tmp_path / "s.sqlite3") as other:
        await other.append_message(conv, Message("user", "written elsewhere"))
    assert (await store.in_context(conv))[-1].message.content == "written elsewhere"
    await store.close()


async def test_a_turn_ends_reflection_read_gives_the_same_answers_as_the_two_reads(tmp_path: Path) -> None:
    from orchestrator.store import ReflectionRecord, ReflectionState, utc_now

    store, conv = await open_with_conversation(tmp_path)
    other_conv = (await store.create_conversation("a1")).id
    for n, status in enumerate(("pending", "merged")):
        await store.save_reflection(
            ReflectionRecord(
                id=f"r{n}", agent_id="a1", conversation_id=conv, branch=f"b{n}", trigger="manual", status=status,
                reason=None, base_revision=None, through_seq=0, commits=(), files=(),
                created_at=utc_now(), updated_at=utc_now(),
            )
        )
    await store.save_reflection_state(ReflectionState(conv, "a1", reflected_through_seq=7, compaction_pending=True))
    records, state = await store.reflections_and_state("a1", conv)
    assert records == await store.reflections("a1", status="pending") and [r.id for r in records] == ["r0"]
    assert state == await store.reflection_state(conv, "a1") and state.compaction_pending
    assert (await store.reflections_and_state("a1", other_conv))[1] == ReflectionState(other_conv, "a1")
    assert (await store.reflections_and_state("nobody", conv))[0] == []
    await store.close()


async def test_a_turn_ends_reflection_read_returns_every_retryable_status_through_its_index(tmp_path: Path) -> None:
    import sqlite3

    from orchestrator.store import ReflectionRecord, utc_now
    from orchestrator.store.reflections import RETRYABLE_QUERY, RETRYABLE_STATUSES

    store, conv = await open_with_conversation(tmp_path)
    statuses = sorted(RETRYABLE_STATUSES | {"merged", "no_changes", "failed", "running", "discarded"})
    for n, status in enumerate(statuses):
        await store.save_reflection(
            ReflectionRecord(
                id=f"r{n:02d}", agent_id="a1", conversation_id=conv, branch=f"b{n}", trigger="manual", status=status,
                reason=None, base_revision=None, through_seq=0, commits=(), files=(),
                created_at=utc_now(), updated_at=utc_now(),
            )
        )
    records, _ = await store.reflections_and_state("a1", conv)
    assert sorted(r.status for r in records) == sorted(RETRYABLE_STATUSES)
    await store.close()

    def explain() -> str:
        with sqlite3.connect(tmp_path / "s.sqlite3") as conn:
            return " ".join(row[3] for row in conn.execute("EXPLAIN QUERY PLAN " + RETRYABLE_QUERY, ("a1",)))

    plan = await anyio.to_thread.run_sync(explain)
    assert "USING INDEX reflections_retryable" in plan, f"the turn end's read scans every reflection: {plan}"


async def test_concurrent_state_changes_are_all_kept(tmp_path: Path) -> None:
    """A compaction's event and a reflection's finish change the trigger state at once: each change
    reads and writes in one transaction, so none is lost (a read in one job and a write in another
    kept only the last)."""
    from dataclasses import replace

    import anyio

    from orchestrator.store import ReflectionState

    store, conv = await open_with_conversation(tmp_path)

    def one_more(state: ReflectionState) -> ReflectionState:
        return replace(state, failed_at_step=state.failed_at_step + 1)

    async with anyio.create_task_group() as tg:
        for _ in range(30):
            tg.start_soon(store.update_reflection_state, conv, "a1", one_more)
    assert (await store.reflection_state(conv, "a1")).failed_at_step == 30
    await store.close()

"""The reminder queue: dedup by key, one-shot flags, the bounded queue. Real SQLite files, on trio and asyncio."""

from __future__ import annotations

from pathlib import Path

import pytest

from orchestrator.models.types import Message
from orchestrator.store import Store
from orchestrator.store.reminder_queue import EnqueuePlan, plan_enqueue
from tests.store.support import open_with_conversation

pytestmark = pytest.mark.anyio


async def test_reminders_dedup_once_per_turn_and_survive_reopen(tmp_path: Path) -> None:
    path = tmp_path / "s.sqlite3"
    store, conv = await open_with_conversation(tmp_path)
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
    store, conv = await open_with_conversation(tmp_path)
    try:
        for i in range(30):
            await store.enqueue_reminder(conv, f"k{i}", f"t{i}")
        pending = await store.pending_reminders(conv)
        assert [p.key for p in pending] == [f"k{i}" for i in range(5, 30)]
    finally:
        await store.close()


def test_plan_replaces_a_pending_key_in_place_and_caps_the_queue_oldest_first() -> None:
    assert plan_enqueue(["a", "b"], "a") == EnqueuePlan(replace=True, evict=())
    assert plan_enqueue(["a", "b"], "c", limit=3) == EnqueuePlan(replace=False, evict=())
    assert plan_enqueue(["a", "b", "c"], "d", limit=3) == EnqueuePlan(replace=False, evict=("a",))
    assert plan_enqueue(["a", "b", "c"], "c", limit=2) == EnqueuePlan(replace=True, evict=())


async def test_replacing_a_reminder_keeps_its_place_and_the_newest_entries(tmp_path: Path) -> None:
    store, conv = await open_with_conversation(tmp_path)
    try:
        for i in range(25):
            await store.enqueue_reminder(conv, f"k{i}", f"t{i}")
        await store.enqueue_reminder(conv, "k0", "t0 again")
        pending = await store.pending_reminders(conv)
        assert [p.key for p in pending][:2] == ["k0", "k1"] and pending[0].text == "t0 again"
        await store.enqueue_reminder(conv, "new", "n")
        assert [p.key for p in await store.pending_reminders(conv)] == [
            *(f"k{i}" for i in range(1, 25)),
            "new",
        ]
    finally:
        await store.close()

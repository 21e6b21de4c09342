"""The event log. Real SQLite files, on trio and asyncio."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.store.support import open_with_conversation

pytestmark = pytest.mark.anyio


async def test_events(tmp_path: Path) -> None:
    store, conv = await open_with_conversation(tmp_path)
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


async def test_last_event_is_the_agents_newest_of_the_kinds(tmp_path: Path) -> None:
    store, conv = await open_with_conversation(tmp_path)
    try:
        assert await store.last_event(agent_id="a1", kinds=["x.held", "x.launch"]) is None
        await store.record_event("x.held", {"n": 1}, agent_id="a1", conversation_id=conv)
        await store.record_event("x.launch", agent_id="a1")
        held = await store.record_event("x.held", {"n": 2}, agent_id="a1")
        await store.record_event("x.other", agent_id="a1")
        await store.record_event("x.held", {"n": 3}, agent_id="a2")
        assert await store.last_event(agent_id="a1", kinds=["x.held", "x.launch"]) == held
        launch = await store.last_event(agent_id="a1", kinds=["x.launch"])
        assert launch is not None and launch.kind == "x.launch"
    finally:
        await store.close()


async def test_a_follower_sees_every_recorded_event_in_order_until_it_stops(tmp_path: Path) -> None:
    store, conv = await open_with_conversation(tmp_path)
    try:
        seen: list[str] = []
        stop = store.follow_events(lambda event: seen.append(f"{event.id}:{event.kind}"))
        first = await store.record_event("a.one", agent_id="a1")
        second = await store.record_event("a.two", {"n": 2}, conversation_id=conv)
        stop()
        await store.record_event("a.three")
        assert seen == [f"{first.id}:a.one", f"{second.id}:a.two"]
        assert [e.kind for e in await store.events()] == ["a.one", "a.two", "a.three"]
    finally:
        await store.close()


def test_payloads_are_encoded_as_json_dumps_would_keeping_non_ascii_text() -> None:
    import json

    from orchestrator.store.jobs import dumps

    payload = {"text": "设定：回答末尾总是加上 🦉", "n": 1.5, "nested": [None, True, {"b": 2, "a": 1}]}
    assert dumps(payload) == json.dumps(payload, ensure_ascii=False)
    assert "🦉" in dumps(payload) and json.loads(dumps(payload)) == payload


async def test_concurrent_writers_are_followed_in_commit_order_with_none_dropped(tmp_path: Path) -> None:
    """A lane wakes the writers of a batch of jobs together and the loop resumes them in any order
    (trio shuffles): a follower still hears every event in id order, as the batch runner's event
    pump needs (it skips an id at or below the last one it took)."""
    import anyio

    store, _conv = await open_with_conversation(tmp_path)
    try:
        heard: list[int] = []
        store.follow_events(lambda event: heard.append(event.id))
        for _ in range(5):
            async with anyio.create_task_group() as tg:
                for n in range(40):
                    tg.start_soon(store.record_event, f"w.{n}")
        assert len(heard) == 200
        assert heard == sorted(heard)
    finally:
        await store.close()

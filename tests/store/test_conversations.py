"""Agents and conversations in the store. Real SQLite files, on trio and asyncio."""

from __future__ import annotations

from pathlib import Path

import pytest

from orchestrator.models.types import Message
from orchestrator.store import StoreError
from tests.store.support import open_with_conversation

pytestmark = pytest.mark.anyio


async def test_agents_and_conversations(tmp_path: Path) -> None:
    store, conv_id = await open_with_conversation(tmp_path)
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

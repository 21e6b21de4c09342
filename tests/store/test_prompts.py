"""The compiled-prompt row per conversation. Real SQLite files, on trio and asyncio."""

from __future__ import annotations

from pathlib import Path

import pytest

from orchestrator.models.types import Message
from orchestrator.store import PromptRecord
from tests.store.support import open_with_conversation

pytestmark = pytest.mark.anyio


async def test_prompt_cache(tmp_path: Path) -> None:
    store, conv = await open_with_conversation(tmp_path)
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

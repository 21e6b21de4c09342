"""Turn records and their status. Real SQLite files, on trio and asyncio."""

from __future__ import annotations

from pathlib import Path

import pytest

from orchestrator.store import StoreError
from tests.store.support import open_with_conversation

pytestmark = pytest.mark.anyio


async def test_turn_status(tmp_path: Path) -> None:
    store, conv = await open_with_conversation(tmp_path)
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

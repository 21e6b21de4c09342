"""A store with one agent and one conversation, the starting point of most store tests."""

from __future__ import annotations

from pathlib import Path

from orchestrator.store import Store

__all__ = ["open_with_conversation"]


async def open_with_conversation(tmp_path: Path) -> tuple[Store, str]:
    store = await Store.open(tmp_path / "s.sqlite3")
    await store.ensure_agent("a1", name="Ada")
    conv = await store.create_conversation("a1")
    return store, conv.id

"""The runtime: agent and conversation lookups, the store it opens, and the plugins it runs."""

from __future__ import annotations

from pathlib import Path

import anyio
import pytest

from orchestrator.base.paths import agent_memory_dir
from orchestrator.runtime.plugins import Plugins
from orchestrator.runtime.runtime import Runtime
from orchestrator.store import Store, StoreError

pytestmark = pytest.mark.anyio


async def test_looking_up_an_unknown_agent_creates_nothing(tmp_path: Path) -> None:
    async with Runtime.open(workspace=tmp_path) as rt:
        with pytest.raises(StoreError, match="no agent 'ghost'"):
            await rt.agent("ghost", create=False)
        assert await rt.store.get_agent("ghost") is None


async def test_a_corrupt_store_file_is_a_store_error_naming_it(tmp_path: Path) -> None:
    path = tmp_path / "broken.sqlite3"
    await anyio.Path(path).write_bytes(b"this is not a database" * 100)
    with pytest.raises(StoreError, match="broken.sqlite3"):
        await Store.open(path)


async def test_recovery_plugins_run_once_per_agent_and_never_for_a_lookup(tmp_path: Path) -> None:
    calls: list[tuple[str, Path]] = []

    async def recover(store: Store, agent_id: str, memory_dir: Path) -> None:
        calls.append((agent_id, memory_dir))

    async with Runtime.open(workspace=tmp_path, plugins=Plugins(recovery=(recover,))) as rt:
        first = await rt.agent("ada")
        await rt.agent("ada")
        await rt.agent("ada", create=False)
        await rt.agent("bob")
    assert calls == [("ada", first.memory_dir), ("bob", agent_memory_dir("bob"))]


async def test_a_runtime_without_plugins_loads_agents_with_no_recovery(tmp_path: Path) -> None:
    async with Runtime.open(workspace=tmp_path) as rt:
        assert rt.plugins == Plugins()
        profile = await rt.agent("ada")
        assert await anyio.Path(profile.memory_dir / ".git").exists()


async def test_an_agent_and_its_settings_come_from_the_one_row_that_loading_it_read(tmp_path: Path) -> None:
    async with Runtime.open(workspace=tmp_path) as rt:
        await rt.store.ensure_agent("ada", settings={"model": "kept-model", "description": "a poet"})
        profile, settings = await rt.agent_with_settings("ada", {"max_steps": 7})
        assert profile.description == "a poet"
        assert settings.model == "kept-model" and settings.max_steps == 7
        assert settings == await rt.agent_settings("ada", {"max_steps": 7})
        assert profile == await rt.agent("ada")

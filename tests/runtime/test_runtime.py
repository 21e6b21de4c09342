from __future__ import annotations

from pathlib import Path

import anyio
import pytest

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

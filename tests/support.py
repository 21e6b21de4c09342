"""Helpers shared by several test modules (fixtures live in conftest.py)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import anyio

from orchestrator.memfs.locks import merge_lock


@asynccontextmanager
async def hold_merge_lock(repo: Path) -> AsyncIterator[None]:
    """Hold the repository's merge lock in another task, as a reflection merge would."""
    held, release = anyio.Event(), anyio.Event()

    async def holder() -> None:
        async with merge_lock(repo):
            held.set()
            await release.wait()

    async with anyio.create_task_group() as tg:
        tg.start_soon(holder)
        await held.wait()
        try:
            yield
        finally:
            release.set()


class SleepRecorder:
    """An injectable backoff wait that records the delays instead of sleeping."""

    def __init__(self) -> None:
        self.delays: list[float] = []

    async def __call__(self, seconds: float) -> None:
        self.delays.append(seconds)

"""SQLite connections on the bounded lane pool (D8): many stores, few threads, each
connection still served by one thread in order."""

from __future__ import annotations

import threading
from pathlib import Path

import anyio
import pytest

from orchestrator.models.types import Message
from orchestrator.store import Store
from orchestrator.store.worker import lane_count

pytestmark = pytest.mark.anyio


def _lane_threads() -> set[str]:
    return {t.name for t in threading.enumerate() if t.name.startswith("sqlite-lane-")}


async def test_a_hundred_open_stores_share_the_bounded_lanes(tmp_path: Path) -> None:
    stores = [await Store.open(tmp_path / f"s{i}.sqlite3") for i in range(100)]
    try:
        assert 1 <= len(_lane_threads()) <= lane_count()

        async def chat(store: Store, n: int) -> None:
            await store.ensure_agent("a")
            conv = await store.create_conversation("a")
            for k in range(5):
                await store.append_message(conv.id, Message(role="user", content=f"{n}-{k}"))
            assert [m.message.content for m in await store.in_context(conv.id)] == [f"{n}-{k}" for k in range(5)]

        async with anyio.create_task_group() as tg:
            for n, store in enumerate(stores):
                tg.start_soon(chat, store, n)
        threads = {await store._run(lambda _conn: threading.current_thread().name) for store in stores}
        assert threads <= _lane_threads()
    finally:
        for store in stores:
            await store.close()
    assert len(_lane_threads()) <= lane_count()


async def test_one_connection_always_runs_on_the_same_thread(tmp_path: Path) -> None:
    async with Store.opened(tmp_path / "s.sqlite3") as store:
        names = {await store._run(lambda _conn: threading.current_thread().name) for _ in range(20)}
        assert len(names) == 1


async def test_a_store_that_cannot_open_frees_its_lane_and_says_why(tmp_path: Path) -> None:
    (tmp_path / "bad.sqlite3").write_bytes(b"this is not a database" * 100)
    before = len(_lane_threads())
    for _ in range(3):
        with pytest.raises(Exception, match="not usable"):
            await Store.open(tmp_path / "bad.sqlite3")
    assert len(_lane_threads()) <= max(before, lane_count())


async def test_jobs_finished_in_one_wake_each_reach_their_own_caller(tmp_path: Path) -> None:
    """Jobs queued behind a slow one are finished together and their loop is woken once for all
    of them (``worker._wake``): every caller still gets its own result, or its own error."""
    import threading

    stores = [await Store.open(tmp_path / f"s{i}.sqlite3") for i in range(2 * lane_count())]
    got: dict[tuple[int, int], object] = {}

    def job(n: int, k: int) -> int:
        if (n + k) % 3 == 0:
            raise ValueError(f"{n}-{k}")
        return n * 100 + k

    async def ask(n: int, store: Store) -> None:
        for k in range(4):
            try:
                got[(n, k)] = await store._run(lambda _conn, n=n, k=k: job(n, k))
            except ValueError as exc:
                got[(n, k)] = str(exc)

    release = threading.Event()
    try:
        async with anyio.create_task_group() as tg:
            for store in stores:
                tg.start_soon(store._run, lambda _conn: release.wait(60))
            await anyio.wait_all_tasks_blocked()
            for n, store in enumerate(stores):
                tg.start_soon(ask, n, store)
            await anyio.wait_all_tasks_blocked()  # every ask queued behind the held lanes
            release.set()
    finally:
        for store in stores:
            await store.close()
    assert got == {
        (n, k): (f"{n}-{k}" if (n + k) % 3 == 0 else n * 100 + k) for n in range(len(stores)) for k in range(4)
    }

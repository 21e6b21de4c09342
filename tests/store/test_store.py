"""The store facade against a real SQLite file, on trio and asyncio: opening and migration, compaction's
commit point, crash and cancellation safety, sharing one file, closing."""

from __future__ import annotations

import os
import signal
import sqlite3
import subprocess
import sys
import textwrap
import threading
from functools import partial
from pathlib import Path

import anyio
import anyio.lowlevel
import pytest

from orchestrator.models.types import Message
from orchestrator.store import PromptRecord, Store, StoreError
from orchestrator.store.schema import SCHEMA_VERSION
from tests.store.support import open_with_conversation

pytestmark = pytest.mark.anyio


def _pragma(path: Path, name: str) -> object:
    conn = sqlite3.connect(path)
    try:
        return conn.execute(f"PRAGMA {name}").fetchone()[0]
    finally:
        conn.close()


async def test_open_creates_schema_in_wal(tmp_path: Path) -> None:
    path = tmp_path / "deep" / "s.sqlite3"
    async with Store.opened(path) as store:
        assert await store.get_agent("nobody") is None
    assert await anyio.to_thread.run_sync(_pragma, path, "user_version") == SCHEMA_VERSION
    assert await anyio.to_thread.run_sync(_pragma, path, "journal_mode") == "wal"
    async with Store.opened(path) as store:  # reopening does not re-run migrations
        assert await store.list_agents() == []


async def test_replace_in_context(tmp_path: Path) -> None:
    store, conv = await open_with_conversation(tmp_path)
    try:
        stored = await store.append_messages(conv, [Message(role="user", content=f"m{i}") for i in range(5)])
        await store.mark_sent(conv, "agent-info")
        prompt = PromptRecord(conv, "a1", "recompiled", "core", "t", "h", memfs_revision="r2")
        summary = await store.replace_in_context(
            conv,
            Message(role="user", content="Note: 3 messages ...", kind="summary"),
            [stored[4].id, stored[3].id],
            metadata={"compaction": {"summary": "raw summary text", "stats": {"trigger": "manual"}}},
            prompt=prompt,
            rearm=["agent-info"],
        )
        ids = [s.id for s in await store.in_context(conv)]
        assert ids == [summary.id, stored[3].id, stored[4].id]
        assert len(await store.transcript(conv)) == 6
        assert await store.get_prompt(conv) == prompt
        assert not await store.was_sent(conv, "agent-info")
        with pytest.raises(StoreError, match="not in the context"):
            await store.replace_in_context(
                conv, Message(role="user", content="s", kind="summary"), [stored[0].id]
            )
        assert [s.id for s in await store.in_context(conv)] == ids
    finally:
        await store.close()


_CRASHER = textwrap.dedent(
    """
    import sys, anyio
    from orchestrator.models.types import Message
    from orchestrator.store import Store

    async def main(path, conv):
        store = await Store.open(path)
        turn = await store.begin_turn(conv)
        print(turn, flush=True)
        await store.append_messages(conv, [Message(role="user", content="lost one"), Message(role="user", content="lost two")], turn_id=turn)

    anyio.run(main, sys.argv[1], sys.argv[2])
    """
)


async def test_crash_mid_transaction_then_reopen(tmp_path: Path) -> None:
    path = tmp_path / "s.sqlite3"
    store, conv = await open_with_conversation(tmp_path)
    kept = await store.append_message(conv, Message(role="user", content="kept"))
    await store.close()
    env = {**os.environ, "REVERIE_FAULT": "store.append.before_in_context"}
    # A plain thread, not anyio.run_process: the conftest guard rejects asyncio's Popen on the loop.
    run = partial(
        subprocess.run,
        [sys.executable, "-c", _CRASHER, str(path), conv],
        env=env,
        capture_output=True,
        text=True,
        cwd=Path(__file__).parents[2],
    )
    result = await anyio.to_thread.run_sync(run)
    assert result.returncode == -signal.SIGKILL, result.stderr
    turn_id = result.stdout.strip()
    async with Store.opened(path) as store:
        assert [m.id for m in await store.transcript(conv)] == [kept.id]
        assert [m.id for m in await store.in_context(conv)] == [kept.id]
        assert await store.search("lost", agent_id="a1") == []
        turn = await store.get_turn(turn_id)
        assert turn is not None and turn.status == "interrupted"


async def test_cancelled_caller_still_commits(tmp_path: Path) -> None:
    store, conv = await open_with_conversation(tmp_path)
    try:
        with anyio.CancelScope() as scope:
            scope.cancel()
            stored = await store.append_message(conv, Message(role="user", content="written anyway"))
            assert stored.message.content == "written anyway"  # the result still arrives
            await anyio.lowlevel.checkpoint()
            pytest.fail("cancellation should be delivered at the next checkpoint")
        assert scope.cancelled_caught
        assert [m.message.content for m in await store.in_context(conv)] == ["written anyway"]
    finally:
        await store.close()


async def test_caller_cancelled_while_its_job_runs_gets_the_result_first(tmp_path: Path) -> None:
    """Cancelled mid-job (not before it): the job runs to the end, its result reaches the caller,
    and the cancellation lands at the caller's next checkpoint."""
    store, _conv = await open_with_conversation(tmp_path)
    started, release = threading.Event(), threading.Event()

    def slow(_conn: sqlite3.Connection) -> str:
        started.set()
        release.wait(60)
        return "finished"

    try:
        results: list[str] = []
        with anyio.CancelScope() as scope:
            async with anyio.create_task_group() as tg:

                async def cancel_when_running() -> None:
                    await anyio.to_thread.run_sync(started.wait)
                    scope.cancel()
                    release.set()

                tg.start_soon(cancel_when_running)
                results.append(await store._run(slow))
                await anyio.lowlevel.checkpoint()
                results.append("not cancelled")
        assert scope.cancelled_caught
        assert results == ["finished"]
    finally:
        await store.close()


async def test_two_stores_share_one_file(tmp_path: Path) -> None:
    path = tmp_path / "s.sqlite3"
    store, conv = await open_with_conversation(tmp_path)
    other = await Store.open(path)
    try:
        async with anyio.create_task_group() as tg:
            for i in range(10):
                tg.start_soon(store.append_message, conv, Message(role="user", content=f"a{i}"))
                tg.start_soon(other.append_message, conv, Message(role="user", content=f"b{i}"))
        assert len(await other.in_context(conv)) == 20
    finally:
        await other.close()
        await store.close()


async def test_closed_store_refuses_work(tmp_path: Path) -> None:
    store, _ = await open_with_conversation(tmp_path)
    await store.close()
    await store.close()
    with pytest.raises(RuntimeError, match="closed"):
        await store.list_agents()

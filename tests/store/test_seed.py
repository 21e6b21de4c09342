"""A new store file is written from an empty database migrated once per process: it must be the
database the migrations build, and an existing file (old, current or from the future) must still go
through the version check."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import anyio
import pytest

from orchestrator.store import Store, StoreError
from orchestrator.store.schema import MIGRATIONS, SCHEMA_VERSION, configure_connection, migrate, seed_store

pytestmark = pytest.mark.anyio


def _shape(path: Path) -> tuple[int, list[tuple[str, str, str, str | None]]]:
    conn = sqlite3.connect(path)
    try:
        version = conn.execute("PRAGMA user_version").fetchone()[0]
        rows = conn.execute("SELECT type, name, tbl_name, sql FROM sqlite_master ORDER BY type, name").fetchall()
        return version, rows
    finally:
        conn.close()


def _migrated_file(path: Path, up_to: int = SCHEMA_VERSION, claim: int | None = None) -> None:
    """A file built statement by statement up to version ``up_to``, labelled ``claim`` if given."""
    conn = sqlite3.connect(path, isolation_level=None)
    try:
        for version in range(up_to):
            conn.executescript(MIGRATIONS[version])
            conn.execute(f"PRAGMA user_version = {version + 1}")
        if claim is not None:
            conn.execute(f"PRAGMA user_version = {claim}")
    finally:
        conn.close()


def test_seeded_store_is_the_migrated_schema(tmp_path: Path) -> None:
    seeded, built = tmp_path / "seeded.sqlite3", tmp_path / "built.sqlite3"
    assert seed_store(seeded)
    conn = sqlite3.connect(built, isolation_level=None)
    try:
        configure_connection(conn)
    finally:
        conn.close()
    assert _shape(seeded) == _shape(built)
    assert _shape(seeded)[0] == SCHEMA_VERSION
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".")] == []


def test_seed_leaves_existing_files_alone(tmp_path: Path) -> None:
    store = tmp_path / "s.sqlite3"
    store.write_bytes(b"not mine to replace")
    assert not seed_store(store)
    assert store.read_bytes() == b"not mine to replace"
    orphan = tmp_path / "o.sqlite3"
    Path(f"{orphan}-wal").write_bytes(b"")
    assert not seed_store(orphan)
    assert not orphan.exists()


async def test_new_store_opens_seeded_in_wal(tmp_path: Path) -> None:
    path = tmp_path / "deep" / "s.sqlite3"
    async with Store.opened(path) as store:
        await store.ensure_agent("a1")
        conv = await store.create_conversation("a1")
        assert (await store.get_conversation(conv.id)) is not None
    assert await anyio.to_thread.run_sync(_shape, path) == await anyio.to_thread.run_sync(_reference_shape, tmp_path)
    assert await anyio.to_thread.run_sync(_journal_mode, path) == "wal"


def _journal_mode(path: Path) -> str:
    conn = sqlite3.connect(path)
    try:
        return str(conn.execute("PRAGMA journal_mode").fetchone()[0])
    finally:
        conn.close()


def _reference_shape(tmp_path: Path) -> tuple[int, list[tuple[str, str, str, str | None]]]:
    reference = tmp_path / "reference.sqlite3"
    conn = sqlite3.connect(reference, isolation_level=None)
    try:
        migrate(conn)
    finally:
        conn.close()
    return _shape(reference)


async def test_older_store_is_still_migrated(tmp_path: Path) -> None:
    path = tmp_path / "old.sqlite3"
    await anyio.to_thread.run_sync(_migrated_file, path, 1)
    async with Store.opened(path) as store:
        await store.ensure_agent("a1")
    version, rows = await anyio.to_thread.run_sync(_shape, path)
    assert version == SCHEMA_VERSION
    assert rows == (await anyio.to_thread.run_sync(_reference_shape, tmp_path))[1]


async def test_store_from_the_future_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "future.sqlite3"
    await anyio.to_thread.run_sync(_migrated_file, path, SCHEMA_VERSION, SCHEMA_VERSION + 1)
    with pytest.raises(StoreError, match="newer than this reverie understands"):
        await Store.open(path)
    names = [p.name async for p in anyio.Path(tmp_path).iterdir()]
    assert sorted(n for n in names if "future" in n or n.startswith(".")) == ["future.sqlite3"]


async def test_store_under_a_file_is_one_clear_error(tmp_path: Path) -> None:
    blocker = tmp_path / "not-a-dir"
    await anyio.Path(blocker).write_text("x")
    with pytest.raises(StoreError, match=r"cannot create .*not-a-dir"):
        await Store.open(blocker / "s.sqlite3")


async def test_reopened_store_still_recovers_a_dead_processs_turn(tmp_path: Path) -> None:
    """Only a file seeded just now skips recovery: one that exists is checked for running turns."""
    path = tmp_path / "s.sqlite3"
    async with Store.opened(path) as store:
        await store.ensure_agent("a1")
        conv = await store.create_conversation("a1")
        turn = await store.begin_turn(conv.id)
    await anyio.to_thread.run_sync(_claim_for_dead_process, path, turn)
    async with Store.opened(path) as store:
        (recorded,) = await store.turns(conv.id)
        assert recorded.status == "interrupted"


def _claim_for_dead_process(path: Path, turn: str) -> None:
    conn = sqlite3.connect(path, isolation_level=None)
    try:
        conn.execute("UPDATE turns SET status = 'running', owner_pid = 2147483646 WHERE id = ?", (turn,))
    finally:
        conn.close()


def _beside(path: Path) -> list[str]:
    """The files SQLite keeps next to a database (journal, WAL, shared memory)."""
    return sorted(p.name for p in path.parent.iterdir() if p.name.startswith(path.name) and p != path)


async def test_a_batch_task_store_skips_syncs_and_journal_files_and_any_other_store_keeps_them(tmp_path: Path) -> None:
    from orchestrator.base.paths import using_home
    from orchestrator.batch.runner import run_home

    async def settings(path: Path) -> tuple[int, str, list[str]]:
        async with Store.opened(path) as store:
            await store.ensure_agent("agent-a")
            conversation = await store.create_conversation("agent-a")
            await store.record_event("probe", {"n": 1}, conversation_id=conversation.id)
            value: int = await store._run(lambda conn: conn.execute("PRAGMA synchronous").fetchone()[0])
            mode: str = await store._run(lambda conn: conn.execute("PRAGMA journal_mode").fetchone()[0])
            beside = await anyio.to_thread.run_sync(_beside, path)
        return value, mode, beside

    assert await settings(tmp_path / "plain.sqlite3") == (1, "wal", ["plain.sqlite3-shm", "plain.sqlite3-wal"])
    with using_home(run_home(tmp_path / "run")):
        assert await settings(tmp_path / "task.sqlite3") == (0, "memory", [])
    assert await anyio.to_thread.run_sync(_beside, tmp_path / "task.sqlite3") == []
    assert (await settings(tmp_path / "after.sqlite3"))[:2] == (1, "wal")
    async with Store.opened(tmp_path / "task.sqlite3") as store:
        events = await store.events()
        mode = await store._run(lambda conn: conn.execute("PRAGMA journal_mode").fetchone()[0])
    assert [e.kind for e in events if e.kind == "probe"] == ["probe"] and mode == "wal", "a task store opened later is an ordinary one"

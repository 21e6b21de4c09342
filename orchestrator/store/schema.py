"""The SQLite schema and its migrations, versioned by ``PRAGMA user_version``.

Each migration is a script that moves the database from version ``n`` to ``n + 1``; they run in one
``BEGIN IMMEDIATE`` transaction together with the version bump, so a crash during a migration leaves
the previous version intact. Runs in the connection worker thread only.

``search_fts`` holds one row per search candidate (a projected message part, COMPACTION-8.1) with
``rowid = seq * PARTS_PER_MESSAGE + part``, so a candidate finds its message by primary key and a
message's candidates form one rowid range.

A brand-new store file is not built statement by statement: ``seed_store`` writes it as a copy of an
empty database migrated once per process in memory (a batch run creates a store per task, and the
migrations were most of the cost of opening one). The version check still runs on every open, so an
older file is migrated as before.
"""

from __future__ import annotations

import os
import sqlite3
import threading
from pathlib import Path

from orchestrator.base.paths import current_home
from orchestrator.store.records import StoreError
from orchestrator.store.worker import connect

__all__ = [
    "BUSY_TIMEOUT_MS",
    "MIGRATIONS",
    "PARTS_PER_MESSAGE",
    "SCHEMA_VERSION",
    "STORE_SYNC_VARIABLE",
    "batch_store",
    "configure_connection",
    "migrate",
    "seed_store",
]

BUSY_TIMEOUT_MS = 10_000
PARTS_PER_MESSAGE = 4096

_V1 = """
CREATE TABLE agents (
    id TEXT PRIMARY KEY,
    name TEXT NOT NULL,
    created_at TEXT NOT NULL,
    settings TEXT NOT NULL DEFAULT '{}'
);
CREATE TABLE conversations (
    id TEXT PRIMARY KEY,
    agent_id TEXT NOT NULL REFERENCES agents(id),
    created_at TEXT NOT NULL,
    title TEXT,
    hidden INTEGER NOT NULL DEFAULT 0
);
CREATE INDEX conversations_by_agent ON conversations(agent_id, created_at);
CREATE TABLE turns (
    id TEXT PRIMARY KEY,
    conversation_id TEXT NOT NULL REFERENCES conversations(id),
    started_at TEXT NOT NULL,
    ended_at TEXT,
    status TEXT NOT NULL,
    error TEXT,
    owner_host TEXT NOT NULL,
    owner_pid INTEGER NOT NULL
);
CREATE INDEX turns_running ON turns(status) WHERE status = 'running';
CREATE TABLE messages (
    seq INTEGER PRIMARY KEY AUTOINCREMENT,
    id TEXT NOT NULL UNIQUE,
    conversation_id TEXT NOT NULL REFERENCES conversations(id),
    role TEXT NOT NULL,
    kind TEXT NOT NULL,
    content TEXT NOT NULL,
    tool_calls TEXT NOT NULL DEFAULT '[]',
    tool_call_id TEXT,
    name TEXT,
    metadata TEXT NOT NULL DEFAULT '{}',
    created_at TEXT NOT NULL,
    turn_id TEXT REFERENCES turns(id)
);
CREATE INDEX messages_by_conversation ON messages(conversation_id, seq);
CREATE TABLE in_context (
    conversation_id TEXT NOT NULL REFERENCES conversations(id),
    position INTEGER NOT NULL,
    message_id TEXT NOT NULL REFERENCES messages(id),
    PRIMARY KEY (conversation_id, position)
) WITHOUT ROWID;
CREATE TABLE prompts (
    conversation_id TEXT PRIMARY KEY REFERENCES conversations(id),
    agent_id TEXT NOT NULL REFERENCES agents(id),
    content TEXT NOT NULL,
    core_memory TEXT NOT NULL,
    compiled_at TEXT NOT NULL,
    raw_system_hash TEXT NOT NULL,
    memfs_revision TEXT,
    memory_format TEXT,
    first_sent_at TEXT,
    compiled_revision TEXT
);
CREATE TABLE reminders (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    conversation_id TEXT NOT NULL REFERENCES conversations(id),
    key TEXT NOT NULL,
    text TEXT NOT NULL,
    priority INTEGER NOT NULL,
    once INTEGER NOT NULL DEFAULT 0,
    enqueued_at TEXT NOT NULL,
    delivered_at TEXT,
    message_id TEXT REFERENCES messages(id)
);
CREATE UNIQUE INDEX reminders_pending_key ON reminders(conversation_id, key) WHERE delivered_at IS NULL;
CREATE TABLE reminder_flags (
    conversation_id TEXT NOT NULL REFERENCES conversations(id),
    key TEXT NOT NULL,
    sent_at TEXT NOT NULL,
    PRIMARY KEY (conversation_id, key)
) WITHOUT ROWID;
CREATE TABLE events (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    at TEXT NOT NULL,
    kind TEXT NOT NULL,
    agent_id TEXT,
    conversation_id TEXT,
    payload TEXT NOT NULL DEFAULT '{}'
);
CREATE INDEX events_by_agent ON events(agent_id, id);
CREATE INDEX events_by_conversation ON events(conversation_id, id);
CREATE VIRTUAL TABLE search_fts USING fts5(
    message_type, text, date UNINDEXED, tokenize = 'trigram'
);
"""

_V2 = """
CREATE TABLE reflection_state (
    conversation_id TEXT PRIMARY KEY REFERENCES conversations(id),
    agent_id TEXT NOT NULL REFERENCES agents(id),
    reflected_through_seq INTEGER NOT NULL DEFAULT 0,
    compaction_pending INTEGER NOT NULL DEFAULT 0,
    consecutive_failures INTEGER NOT NULL DEFAULT 0,
    failed_at_step INTEGER NOT NULL DEFAULT 0,
    paused INTEGER NOT NULL DEFAULT 0,
    updated_at TEXT NOT NULL
);
CREATE TABLE reflections (
    id TEXT PRIMARY KEY,
    agent_id TEXT NOT NULL REFERENCES agents(id),
    conversation_id TEXT REFERENCES conversations(id),
    branch TEXT NOT NULL,
    trigger TEXT NOT NULL,
    status TEXT NOT NULL,
    reason TEXT,
    base_revision TEXT,
    through_seq INTEGER NOT NULL DEFAULT 0,
    commits TEXT NOT NULL DEFAULT '[]',
    files TEXT NOT NULL DEFAULT '[]',
    owner_pid INTEGER,
    created_at TEXT NOT NULL,
    updated_at TEXT NOT NULL
);
CREATE INDEX reflections_by_agent ON reflections(agent_id, created_at);
"""

# D2 outcomes of a reflection: the reason code, the error of a failed run, and the
# retry bookkeeping (JSON: retried, pending_turns, kept_head, resolved_files).
_V3 = """
ALTER TABLE reflections ADD COLUMN reason_code TEXT;
ALTER TABLE reflections ADD COLUMN error TEXT;
ALTER TABLE reflections ADD COLUMN details TEXT NOT NULL DEFAULT '{}';
"""

# The records a turn end may retry (``reflections.RETRYABLE_STATUSES``), found without reading every
# reflection the agent ever settled: a scan of all of them was 1.1 ms per turn end at 1,000 records
# (bench/soak.py, 3,000 turns) and grew with every reflection. The WHERE is spelt as the query spells
# it: SQLite uses a partial index only for a query whose WHERE contains the index's own term.
_V4 = """
CREATE INDEX reflections_retryable ON reflections(agent_id, created_at)
    WHERE status IN ('kept_conflict', 'kept_dirty', 'kept_recovered', 'pending');
"""

MIGRATIONS: tuple[str, ...] = (_V1, _V2, _V3, _V4)
SCHEMA_VERSION = len(MIGRATIONS)


def configure_connection(conn: sqlite3.Connection, *, batch: bool | None = None) -> None:
    """Per-connection settings (journal, busy timeout, foreign keys), then bring the schema up to date.

    A store is a WAL database with ``synchronous = NORMAL`` (a commit survives a process crash, a
    checkpoint syncs), except a batch task's: ``REVERIE_STORE_SYNC=off``, which a batch run sets for
    its task stores, gives ``synchronous = OFF`` and a rollback journal kept in memory. There the
    durable record is ``results.jsonl`` (synced per line): a task's store is closed before its line
    is written, and a task without a line is rerun from scratch, its store deleted first; so a
    crash can only damage the store of a task that will be run again. What that buys: the four
    syncs each task store's close cost (half a 64-task run's time on ext4), and the ``-wal`` and
    ``-shm`` files a WAL store creates and deletes around every task (on a journal-less ext4 a freed
    inode is skipped by every later allocation for seconds to minutes: at a thousand tasks, inode
    allocation was 12% of the run's CPU). Only one connection uses a task store while its task
    runs; a reader elsewhere (``reverie report``) waits for a commit as with any rollback journal."""
    conn.execute(f"PRAGMA busy_timeout = {BUSY_TIMEOUT_MS}")
    if batch_store() if batch is None else batch:
        conn.execute("PRAGMA journal_mode = MEMORY")
        conn.execute("PRAGMA synchronous = OFF")
    else:
        conn.execute("PRAGMA journal_mode = WAL")
        conn.execute("PRAGMA synchronous = NORMAL")
    conn.execute("PRAGMA foreign_keys = ON")
    migrate(conn)


STORE_SYNC_VARIABLE = "REVERIE_STORE_SYNC"


def batch_store() -> bool:
    """Whether stores opened now are batch task stores (``configure_connection``): the current
    home is a batch run's (``Home.scratch``), or ``REVERIE_STORE_SYNC=off``. Read where the store is
    opened (the caller's context), not in the store's lane."""
    return current_home().scratch or os.environ.get(STORE_SYNC_VARIABLE, "").strip().lower() == "off"


def migrate(conn: sqlite3.Connection) -> int:
    """Apply the missing migrations; return the version reached. Refuses a database from the future."""
    current = conn.execute("PRAGMA user_version").fetchone()[0]
    if current > SCHEMA_VERSION:
        raise StoreError(
            f"store schema version {current} is newer than this reverie understands ({SCHEMA_VERSION}); upgrade reverie"
        )
    if current == SCHEMA_VERSION:
        return current
    conn.execute("BEGIN IMMEDIATE")
    try:
        current = conn.execute("PRAGMA user_version").fetchone()[0]
        for version in range(current, SCHEMA_VERSION):
            for statement in _statements(MIGRATIONS[version]):
                conn.execute(statement)
            conn.execute(f"PRAGMA user_version = {version + 1}")
        conn.execute("COMMIT")
    except BaseException:
        conn.execute("ROLLBACK")
        raise
    return SCHEMA_VERSION


def _statements(script: str) -> list[str]:
    """Split a migration script into statements (``executescript`` would commit the open transaction)."""
    statements: list[str] = []
    buffer = ""
    for line in script.splitlines(keepends=True):
        buffer += line
        if sqlite3.complete_statement(buffer):
            statements.append(buffer.strip())
            buffer = ""
    if buffer.strip():
        statements.append(buffer.strip())
    return statements


_templates: dict[bool, bytes] = {}
_template_lock = threading.Lock()


_WAL_FORMAT = b"\x02\x02"
"""Header bytes 18-19 (file format write and read versions) of a WAL database, as ``PRAGMA
journal_mode = WAL`` leaves them: the seeded file is a WAL database closed cleanly, so opening it does
not convert it (which would write through a rollback journal with a full sync). A batch task's store
keeps the rollback format (``configure_connection``)."""


def _template_bytes(batch: bool) -> bytes:
    """An empty database at ``SCHEMA_VERSION``, migrated in memory once per process (per kind)."""
    with _template_lock:
        if batch not in _templates:
            conn = connect(":memory:")
            try:
                migrate(conn)
                image = bytearray(conn.serialize())
            finally:
                conn.close()
            if not batch:
                image[18:20] = _WAL_FORMAT
            _templates[batch] = bytes(image)
        return _templates[batch]


def seed_store(path: Path, *, batch: bool | None = None) -> bool:
    """Create the store file ``path`` already migrated, unless it (or a journal of it) exists; True
    when it wrote one. Written under a private name and hard-linked into place, so a concurrent opener
    sees either no file or the whole one; where linking is refused the file is left to SQLite and
    the migrations (False), as before. Blocking."""
    if any(os.path.lexists(f"{path}{suffix}") for suffix in ("", "-wal", "-journal")):
        return False
    staging = path.with_name(f".{path.name}.{os.getpid()}.{threading.get_ident()}.seed")
    try:
        with open(staging, "xb") as out:
            out.write(_template_bytes(batch_store() if batch is None else batch))
        os.link(staging, path)
    except OSError:
        return False
    finally:
        try:
            os.unlink(staging)
        except OSError:
            pass
    return True

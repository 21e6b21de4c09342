"""Who holds a memory repository's lock (V7): the owner record reverie's holders write, the file a
committing git wrapper names itself by, and the lines a waiter says (real files, real processes)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from orchestrator.memfs.lockowner import (
    WAIT_LINE_PREFIX,
    WRAPPER_HOLDER,
    LockHolder,
    drop_dead_wrappers,
    holder_of,
    holding_as,
    waited_in,
    waiting_line,
)
from orchestrator.memfs.locks import merge_lock, merge_lock_sync
from orchestrator.memfs.names import OWNER_FILE_NAME
from tests.memfs.reflection_helpers import make_repo


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    return make_repo(tmp_path / "memory")


def _dead_pid() -> int:
    child = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    return int(child.stdout)


def test_the_record_names_the_hold_by_what_it_is_for(repo: Path) -> None:
    common = repo / ".git"
    with merge_lock_sync(repo, source="reflection merge"):
        assert holder_of(common) == LockHolder(os.getpid(), "reflection merge")
    assert holder_of(common) is None and not (common / OWNER_FILE_NAME).exists()
    with holding_as("memory undo"), merge_lock_sync(repo):
        assert holder_of(common) == LockHolder(os.getpid(), "memory undo")
    with merge_lock_sync(repo):
        assert holder_of(common) == LockHolder(os.getpid(), "reverie")


@pytest.mark.anyio
async def test_an_async_hold_takes_its_source_from_the_enclosing_task(repo: Path) -> None:
    with holding_as("reflection merge"):
        async with merge_lock(repo):
            record = json.loads((repo / ".git" / OWNER_FILE_NAME).read_text(encoding="utf-8"))
    assert record["source"] == "reflection merge" and record["pid"] == os.getpid()


def test_a_dead_holders_record_says_nothing_and_a_committing_wrapper_is_found(repo: Path) -> None:
    common = repo / ".git"
    dead = _dead_pid()
    (common / OWNER_FILE_NAME).write_text(json.dumps({"pid": dead, "token": "x", "source": "reflection merge"}))
    assert holder_of(common) is None
    wrapper = common / WRAPPER_HOLDER.format(pid=7)
    wrapper.write_text(f"{os.getpid()} agent commit in conversation conv-a\n")
    assert holder_of(common) == LockHolder(os.getpid(), "agent commit in conversation conv-a")
    stale = common / WRAPPER_HOLDER.format(pid=8)
    stale.write_text(f"{dead} agent commit\n")
    drop_dead_wrappers(common)
    assert wrapper.exists() and not stale.exists()


def test_the_lines_name_what_is_known() -> None:
    assert waiting_line(None) == f"{WAIT_LINE_PREFIX}; waiting"
    assert waiting_line(LockHolder(12, "reflection merge")) == f"{WAIT_LINE_PREFIX} (pid 12, reflection merge); waiting"
    assert waiting_line(LockHolder(0, "agent commit")) == f"{WAIT_LINE_PREFIX} (agent commit); waiting"
    output = f"[main 1a2b3c] feat\n{waiting_line(LockHolder(12, 'reflection merge'))}\n 1 file changed\n"
    assert waited_in(output) == (
        "the agent's git command waited for this agent's memory repository lock, "
        "held by another process (pid 12, reflection merge)"
    )
    assert waited_in("nothing waited\n") is None
    assert waited_in(f"echo {WAIT_LINE_PREFIX}\n") is None, "only a line of its own"

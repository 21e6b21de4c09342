"""A run directory has one owner: the process running into it (a ``run`` or a ``sweep``).

Two runs into one ``--out`` would share the tasks' memory repositories and stores, report each
other's work as failures and append twice to ``results.jsonl``. The owner holds an exclusive
``flock`` on ``OUT/.reverie-run.lock`` for the whole run and writes who it is into the file; a
second run is refused with one line naming that process. The kernel drops a ``flock`` when its
holder dies, ``kill -9`` included, so a lock its owner left behind is simply taken by the next run:
there is no staleness rule to get wrong. Worker processes forked by the owner share its lock (the
same open file), so the directory stays owned until the last of them is gone.

The lock is re-entrant within a process (the command takes it before it checks the directory, and
the run it starts takes it again): ``flock`` locks belong to open files, so a second open in the
same process would refuse its own owner.
"""

from __future__ import annotations

import fcntl
import json
import os
import threading
import time
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager, contextmanager
from dataclasses import dataclass
from functools import partial
from pathlib import Path

from anyio import CancelScope

from orchestrator.base import blocking
from orchestrator.base.errors import ReverieError
from orchestrator.store.records import utc_now

__all__ = ["LOCK_FILE", "RunDirBusy", "acquire", "check_free", "hold_run_dir", "own_run_dir", "release"]

LOCK_FILE = ".reverie-run.lock"
_OWNER_WAIT = 2.0


class RunDirBusy(ReverieError):
    """Another process is running into this directory; the message names it."""


@dataclass
class _Held:
    """This process's lock on one directory: the open lock file and how many holds share it."""

    fd: int
    count: int


_held: dict[Path, _Held] = {}
_guard = threading.Lock()


def _describe(path: Path) -> str:
    """Who holds the lock, read from the file; the owner writes it just after taking the lock, so a
    reader that finds it unreadable looks again for up to ``_OWNER_WAIT`` seconds before naming
    nobody (a refusal is rare, and one line naming the pid is worth the short wait)."""
    deadline = time.monotonic() + _OWNER_WAIT
    while True:
        try:
            owner = json.loads(path.read_text(encoding="utf-8"))
            return f"{owner.get('command', 'reverie')} (pid {owner['pid']}, since {owner.get('started', '?')})"
        except (OSError, ValueError, KeyError, TypeError):
            if time.monotonic() >= deadline:
                return "another reverie process"
            time.sleep(0.02)


def _busy(out_dir: Path, path: Path) -> RunDirBusy:
    return RunDirBusy(f"{out_dir} is in use by {_describe(path)}: wait for it to finish, or choose another --out")


def check_free(out_dir: Path) -> None:
    """Raise ``RunDirBusy`` if another process owns ``out_dir`` now; creates nothing. Blocking.

    Only a courtesy (a command says "in use" before it looks at what the directory holds): the
    owner is decided by ``acquire``."""
    key = out_dir.resolve()
    with _guard:
        if key in _held:
            return
    path = key / LOCK_FILE
    try:
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    except OSError:
        return
    try:
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
    except BlockingIOError:
        raise _busy(out_dir, path) from None
    finally:
        os.close(fd)


def acquire(out_dir: Path, command: str) -> Path:
    """Take the directory (creating it); raises ``RunDirBusy`` naming the owner. Blocking."""
    out_dir.mkdir(parents=True, exist_ok=True)
    key = out_dir.resolve()
    with _guard:
        held = _held.get(key)
        if held is not None:
            held.count += 1
            return key
        path = key / LOCK_FILE
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
        else:
            record = json.dumps({"pid": os.getpid(), "command": command, "started": utc_now()}) + "\n"
            data = record.encode()
            os.pwrite(fd, data, 0)
            os.ftruncate(fd, len(data))
            _held[key] = _Held(fd, 1)
            return key
    raise _busy(out_dir, path)  # outside the guard: naming the owner may wait for its record


def release(key: Path) -> None:
    """Give the directory up (the last of this process's holds closes the lock). Blocking."""
    with _guard:
        held = _held[key]
        held.count -= 1
        if held.count:
            return
        del _held[key]
        try:
            os.ftruncate(held.fd, 0)
            fcntl.flock(held.fd, fcntl.LOCK_UN)
        finally:
            os.close(held.fd)


@contextmanager
def own_run_dir(out_dir: Path, command: str) -> Iterator[None]:
    """Own ``out_dir`` for the block (a command's entry, outside any event loop)."""
    key = acquire(out_dir, command)
    try:
        yield
    finally:
        release(key)


@asynccontextmanager
async def hold_run_dir(out_dir: Path, command: str) -> AsyncIterator[None]:
    """Own ``out_dir`` for the body; the file work runs off the loop and the release is shielded."""
    key = await blocking.run_sync("files", partial(acquire, out_dir, command))
    try:
        yield
    finally:
        with CancelScope(shield=True):
            await blocking.run_sync("files", partial(release, key))

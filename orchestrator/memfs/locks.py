"""The per-repository merge lock (DECISIONS R3; turn-loop.md 5.15 "Locking").

Two layers, taken in this order and released in reverse:

* an in-process ``Lock`` keyed by the repository's git common directory, so tasks of one
  process queue fairly instead of all polling the file lock;
* a cross-process OS file lock (the ``filelock`` package) on ``<common dir>/reverie-merge.lock``,
  so the main checkout and every linked worktree, in any process, share one lock.

Staleness (R6): the OS releases a ``flock`` when its holder dies, ``kill -9`` included, so a dead
process can never keep the lock. Beside the lock file the holder writes an owner record
(``reverie-merge.owner.json``: pid, start time, token) for diagnostics; a record whose process is
gone is stale and :func:`release_stale_lock` deletes it. The primary agent's own git commands do
not take this lock; merge-back copes with them through ``--ff-only`` and git's ref locks.
"""

from __future__ import annotations

import json
import os
import secrets
import time
import weakref
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from functools import partial
from pathlib import Path
from typing import Any

import sniffio
from anyio import CancelScope, Lock, WouldBlock, sleep
from filelock import FileLock, Timeout

from orchestrator.base import blocking
from orchestrator.base.processes import pid_alive
from orchestrator.memfs.errors import MemfsError
from orchestrator.memfs.git import common_dir

__all__ = [
    "LOCK_FILE_NAME",
    "OWNER_FILE_NAME",
    "WORKTREE_LOCK_FILE_NAME",
    "LockBusy",
    "common_dir_sync",
    "merge_lock",
    "worktree_admin_lock",
    "release_stale_lock",
]

LOCK_FILE_NAME = "reverie-merge.lock"
OWNER_FILE_NAME = "reverie-merge.owner.json"
WORKTREE_LOCK_FILE_NAME = "reverie-worktrees.lock"
_POLL_SECONDS = 0.01
_MAX_POLL_SECONDS = 0.1

_locks: weakref.WeakKeyDictionary[Any, dict[tuple[Path, str], Lock]] = weakref.WeakKeyDictionary()


class LockBusy(MemfsError, RuntimeError):
    """The merge lock is held elsewhere and the caller asked not to wait."""


def _loop_token() -> Any:
    """An object identifying the running event loop: locks must not cross loops or backends."""
    if sniffio.current_async_library() == "trio":
        import trio

        return trio.lowlevel.current_root_task()
    import asyncio

    return asyncio.get_running_loop()


def _process_lock(common: Path, name: str) -> Lock:
    per_loop = _locks.setdefault(_loop_token(), {})
    lock = per_loop.get((common, name))
    if lock is None:
        lock = per_loop[(common, name)] = Lock()
    return lock


def common_dir_sync(repo_dir: Path) -> Path:
    """The resolved git common directory of ``repo_dir`` (blocking; lock keys compare equal)."""
    return common_dir(Path(repo_dir))


def _try_acquire(lock: FileLock, owner: Path | None, token: str) -> bool:
    try:
        lock.acquire(timeout=0)
    except Timeout:
        return False
    if owner is None:
        return True
    record = {"pid": os.getpid(), "started": time.time(), "token": token}
    tmp = owner.with_name(f"{owner.name}.{token}.tmp")
    tmp.write_text(json.dumps(record), encoding="utf-8")
    os.replace(tmp, owner)
    return True


def _release(lock: FileLock, owner: Path | None, token: str) -> None:
    try:
        if owner is None:
            raise FileNotFoundError
        record = json.loads(owner.read_text(encoding="utf-8"))
        if record.get("token") == token:
            owner.unlink()
    except (OSError, ValueError):
        pass
    lock.release()


@asynccontextmanager
async def _repo_lock(
    repo_dir: Path, file_name: str, owner_name: str | None, *, wait: bool, common_dir: Path | None
) -> AsyncIterator[Path]:
    common = common_dir if common_dir else await blocking.run_sync("git", partial(common_dir_sync, repo_dir))
    in_process = _process_lock(common, file_name)
    if wait:
        await in_process.acquire()
    else:
        try:
            in_process.acquire_nowait()
        except WouldBlock:
            raise LockBusy(f"{repo_dir}: a merge is in progress in this process") from None
    try:
        token = secrets.token_hex(8)
        file_lock = FileLock(str(common / file_name), thread_local=False, is_singleton=False)
        owner = common / owner_name if owner_name else None
        delay = _POLL_SECONDS
        while not await blocking.run_sync("files", partial(_try_acquire, file_lock, owner, token)):
            if not wait:
                raise LockBusy(f"{repo_dir}: a merge is in progress in another process")
            await sleep(delay)
            delay = min(delay * 2, _MAX_POLL_SECONDS)
        try:
            yield common
        finally:
            with CancelScope(shield=True):
                await blocking.run_sync("files", partial(_release, file_lock, owner, token))
    finally:
        in_process.release()


@asynccontextmanager
async def merge_lock(repo_dir: Path, *, wait: bool = True, common_dir: Path | None = None) -> AsyncIterator[Path]:
    """Hold the merge lock of ``repo_dir``'s repository; yields the git common directory.

    Waiting is cancellable (the file lock is polled from a worker thread, never blocking the
    loop). ``wait=False`` raises :class:`LockBusy` at once if another task or process holds it.
    """
    async with _repo_lock(repo_dir, LOCK_FILE_NAME, OWNER_FILE_NAME, wait=wait, common_dir=common_dir) as common:
        yield common


@asynccontextmanager
async def worktree_admin_lock(repo_dir: Path, *, common_dir: Path | None = None) -> AsyncIterator[Path]:
    """Serialise ``git worktree add/remove/prune`` on one repository.

    Git's worktree administration is not safe against itself: a concurrent ``add`` reads another
    one's half-written ``.git/worktrees/<name>`` and a ``prune`` may delete it. Held briefly;
    never taken while waiting for the merge lock, so the two cannot deadlock.
    """
    async with _repo_lock(repo_dir, WORKTREE_LOCK_FILE_NAME, None, wait=True, common_dir=common_dir) as common:
        yield common


def release_stale_lock(common_dir: Path) -> bool:
    """Delete an owner record left by a dead process; True if one was removed (blocking).

    The OS lock itself needs no release: it died with its process. A record whose process is
    alive is left alone.
    """
    owner = common_dir / OWNER_FILE_NAME
    try:
        record = json.loads(owner.read_text(encoding="utf-8"))
        pid = int(record["pid"])
    except FileNotFoundError:
        return False
    except (OSError, ValueError, KeyError, TypeError):
        pid = -1
    if pid > 0 and pid != os.getpid() and pid_alive(pid):
        return False
    if pid == os.getpid():
        return False
    try:
        owner.unlink()
    except FileNotFoundError:
        return False
    return True

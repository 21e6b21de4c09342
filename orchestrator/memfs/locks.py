"""The per-repository lock (D1, R3; TURN-5.15 "Locking").

D1: every git command that writes a memory repository's index or refs takes this lock first, then
git takes its own locks; the pre-commit hook never takes it (it runs inside git, after the lock).
One lock, one order (this lock, the worktree-administration lock, git's own), so nothing deadlocks.
Two layers: an in-process FIFO ``Lock`` per git common directory, then a cross-process ``flock`` on
``<common dir>/reverie-merge.lock``. The OS releases a ``flock`` when its holder dies, so a dead
process never keeps the lock (R6). The owner record says who holds it and what for
(``memfs/lockowner.py``, V7). Holders, waiting and the owner record are in
docs/architecture.md, "The repository lock"."""

from __future__ import annotations

import json
import os
import secrets
import time
import weakref
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from contextlib import asynccontextmanager, contextmanager
from functools import partial
from pathlib import Path
from typing import Any, TypeVar

import sniffio
from anyio import CancelScope, Lock, WouldBlock, fail_after

from orchestrator.base import blocking
from orchestrator.base.flock import FlockWaiter
from orchestrator.base.processes import pid_alive
from orchestrator.memfs.errors import MemfsError
from orchestrator.memfs.git import GitRepo
from orchestrator.memfs.lockowner import (
    LockHolder,
    current_source,
    drop_dead_wrappers,
    drop_owner,
    holder_of,
    write_owner,
)
from orchestrator.memfs.names import LOCK_FILE_NAME, OWNER_FILE_NAME, WORKTREE_LOCK_FILE_NAME

T = TypeVar("T")

__all__ = [
    "LOCK_FILE_NAME",
    "OWNER_FILE_NAME",
    "WORKTREE_LOCK_FILE_NAME",
    "LockBusy",
    "RepositoryNotWritable",
    "call_if_free",
    "common_dir_sync",
    "merge_lock",
    "merge_lock_sync",
    "release_stale_lock",
    "worktree_admin_lock",
]

_SYNC_POLL_SECONDS = 0.005

_locks: weakref.WeakKeyDictionary[Any, dict[tuple[Path, str], Lock]] = weakref.WeakKeyDictionary()


class LockBusy(MemfsError, RuntimeError):
    """The lock is held elsewhere and the caller asked not to wait (or its bounded wait ran out)."""


class RepositoryNotWritable(MemfsError, RuntimeError):
    """The repository's lock file cannot be made (a read-only memory directory); one line."""


def _loop_token() -> Any:
    """An object identifying the running event loop: locks must not cross loops or backends."""
    if sniffio.current_async_library() == "trio":
        # only the running backend's module
        import trio

        return trio.lowlevel.current_root_task()
    # only the running backend's module
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
    return GitRepo(Path(repo_dir)).common_dir()


def _release(waiter: FlockWaiter, owner: Path | None, token: str) -> None:
    if owner is not None:
        drop_owner(owner, token)
    waiter.abandon()


def _take(waiter: FlockWaiter, wait: bool) -> bool:
    """``waiter.acquire``; a lock file that cannot be made (a read-only memory directory) is one
    line naming the folder (A9), not an ``OSError`` traceback."""
    try:
        return waiter.acquire(wait)
    except FileNotFoundError:
        raise  # the repository went away: callers ask where it is again
    except OSError as error:
        raise RepositoryNotWritable(
            f"{waiter.path.parent}: cannot take the memory repository's lock ({error.strerror}); "
            "reverie needs write access there to commit, merge and reflect"
        ) from None


def _acquired(waiter: FlockWaiter, owner: Path | None, token: str, wait: bool, source: str | None = None) -> bool:
    """Take the lock; ``owner`` (the common directory) gets this holder's record (V7)."""
    if not _take(waiter, wait):
        return False
    if owner is not None:
        try:
            write_owner(owner, token, source)
        except OSError:
            pass
    return True


def _try_or_name(waiter: FlockWaiter, owner: Path | None, token: str, source: str) -> tuple[bool, LockHolder | None]:
    """One try without waiting; when it fails, the holder the owner record names (V7), read in
    the same worker hop."""
    if _acquired(waiter, owner, token, False, source):
        return True, None
    return False, holder_of(waiter.path.parent)


@asynccontextmanager
async def _repo_lock(
    repo_dir: Path,
    file_name: str,
    owner_name: str | None,
    *,
    wait: bool,
    max_wait: float | None,
    common_dir: Path | None,
    on_wait: Callable[[LockHolder | None], Awaitable[None]] | None = None,
    source: str | None = None,
) -> AsyncIterator[Path]:
    common = common_dir if common_dir else await blocking.run_sync("git", partial(common_dir_sync, repo_dir))
    in_process = _process_lock(common, file_name)
    try:
        if not wait:
            in_process.acquire_nowait()
        elif max_wait is None:
            await in_process.acquire()
        else:
            with fail_after(max_wait):
                await in_process.acquire()
    except WouldBlock:
        raise LockBusy(f"{repo_dir}: the memory repository is locked by this process") from None
    except TimeoutError:
        raise LockBusy(f"{repo_dir}: the memory repository stayed locked for {max_wait:g} s") from None
    try:
        token = secrets.token_hex(8)
        waiter = FlockWaiter(common / file_name)
        owner = common if owner_name else None
        source = source or current_source()
        try:
            got = False
            if wait and on_wait is not None:
                got, holder = await blocking.run_sync("files", partial(_try_or_name, waiter, owner, token, source))
                if not got and (holder is None or holder.pid != os.getpid()):
                    await on_wait(holder)
            if not got and (max_wait is None or not wait):
                got = await blocking.run_sync("wait", partial(_acquired, waiter, owner, token, wait, source))
            elif not got:
                with fail_after(max_wait):
                    got = await blocking.run_sync("wait", partial(_acquired, waiter, owner, token, True, source))
        except TimeoutError:
            waiter.abandon()
            raise LockBusy(f"{repo_dir}: the memory repository stayed locked for {max_wait:g} s") from None
        except BaseException:
            waiter.abandon()
            raise
        if not got:
            raise LockBusy(f"{repo_dir}: the memory repository is locked by another process")
        try:
            yield common
        finally:
            with CancelScope(shield=True):
                await blocking.run_sync("files", partial(_release, waiter, owner, token))
    finally:
        in_process.release()


@asynccontextmanager
async def merge_lock(
    repo_dir: Path,
    *,
    wait: bool = True,
    max_wait: float | None = None,
    common_dir: Path | None = None,
    on_wait: Callable[[LockHolder | None], Awaitable[None]] | None = None,
    source: str | None = None,
) -> AsyncIterator[Path]:
    """Hold the lock of ``repo_dir``'s repository (D1); yields the git common directory.

    Waiting is cancellable and never blocks the loop. ``wait=False`` raises :class:`LockBusy` at
    once if another task or process holds it; ``max_wait`` bounds the wait (then :class:`LockBusy`).
    ``on_wait`` is awaited once, before waiting, when another process holds the file lock (V5: a
    session says it is queued behind one), with the holder its owner record names (V7); waiting
    behind a task or thread of this process does not call it. ``source`` says in the record what
    the hold is for (default: the enclosing :func:`~orchestrator.memfs.lockowner.holding_as`).
    """
    async with _repo_lock(
        repo_dir, LOCK_FILE_NAME, OWNER_FILE_NAME, wait=wait, max_wait=max_wait, common_dir=common_dir,
        on_wait=on_wait, source=source,
    ) as common:
        yield common


async def call_if_free(
    repo_dir: Path, fn: Callable[[], T], *, common_dir: Path | None = None
) -> tuple[bool, T | None]:
    """``(True, fn())`` run under the repository lock if it is free right now, else ``(False, None)``.

    The same two locks as :func:`merge_lock` in the same order, but taking the file lock, running
    ``fn`` and releasing happen in one worker-thread hop instead of three: the post-turn check of
    every turn pays this, and the lock is nearly always free. Callers fall back to ``merge_lock``.
    ``common_dir``, when the caller knows it (``common_dir_sync``), saves the hop that asks for it.
    """
    common = common_dir if common_dir is not None else await blocking.run_sync("git", partial(common_dir_sync, repo_dir))
    in_process = _process_lock(common, LOCK_FILE_NAME)
    try:
        in_process.acquire_nowait()
    except WouldBlock:
        return False, None
    try:
        return await blocking.run_sync("git", partial(_call_locked, common, fn))
    finally:
        in_process.release()


def _call_locked(common: Path, fn: Callable[[], T]) -> tuple[bool, T | None]:
    """No owner record for this hold: it lasts as long as one status read (~0.1 ms) and nobody
    waits behind it (a busy lock is not waited for), while writing, renaming, reading and deleting
    the record cost ~0.3 ms, more than the check itself, on every turn."""
    waiter = FlockWaiter(common / LOCK_FILE_NAME)
    if not _take(waiter, False):
        return False, None
    try:
        return True, fn()
    finally:
        waiter.abandon()


@contextmanager
def merge_lock_sync(
    repo_dir: Path, *, timeout: float = 120.0, common_dir: Path | None = None, source: str | None = None
) -> Iterator[Path]:
    """The same lock for blocking code in a worker thread (the harness's own commits).

    Only the file lock: ``flock`` locks of separate opens conflict even within one process, so this
    excludes async holders too. Polls (a thread cannot be woken from a blocking ``flock``).
    """
    common = common_dir or common_dir_sync(repo_dir)
    waiter = FlockWaiter(common / LOCK_FILE_NAME)
    token = secrets.token_hex(8)
    deadline = time.monotonic() + timeout
    delay = _SYNC_POLL_SECONDS
    while not _acquired(waiter, common, token, False, source):
        if time.monotonic() > deadline:
            raise LockBusy(f"{repo_dir}: the memory repository stayed locked for {timeout:g} s")
        time.sleep(delay)
        delay = min(delay * 2, 0.05)
    try:
        yield common
    finally:
        _release(waiter, common, token)


@asynccontextmanager
async def worktree_admin_lock(repo_dir: Path, *, common_dir: Path | None = None) -> AsyncIterator[Path]:
    """Serialise ``git worktree add/remove/prune`` on one repository.

    Git's worktree administration is not safe against itself: a concurrent ``add`` reads another
    one's half-written ``.git/worktrees/<name>`` and a ``prune`` may delete it. Held briefly. It
    comes after the repository lock in D1's order; worktree commands touch neither the main
    checkout's index nor an existing ref (``add -b`` creates a new, unique branch under git's own
    ref lock), so they need not wait for a merge.
    """
    async with _repo_lock(
        repo_dir, WORKTREE_LOCK_FILE_NAME, None, wait=True, max_wait=None, common_dir=common_dir
    ) as common:
        yield common


def release_stale_lock(common_dir: Path) -> bool:
    """Delete an owner record left by a dead process; True if one was removed (blocking).

    The OS lock itself needs no release: it died with its process. A record whose process is
    alive is left alone. Killed git wrappers' files naming them (V7) go too.
    """
    drop_dead_wrappers(common_dir)
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

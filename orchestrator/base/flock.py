"""Cross-process exclusive locks on a file (``flock``), waited for in a worker thread.

The OS releases a ``flock`` when its holder dies (``kill -9`` included), so a crashed process can
never keep one: no staleness rules are needed. The blocking ``flock`` runs in a thread so the kernel
wakes the next waiter at once (no polling); a caller cancelled while its thread still waits
*abandons* the waiter, and a lock the thread gets afterwards is released immediately.

Used by the memory repository's lock (``memfs.locks``, D1) and by the per-conversation turn lock of
the supervisor, which serialises turns of one conversation across ``reverie`` processes.
"""

from __future__ import annotations

import fcntl
import os
import threading
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path

from anyio import CancelScope

from orchestrator.base import blocking

__all__ = ["FlockWaiter", "hold_flock"]


@dataclass
class FlockWaiter:
    """A blocking ``flock`` in a worker thread that its (maybe cancelled) caller can abandon."""

    path: Path
    guard: threading.Lock = field(default_factory=threading.Lock)
    fd: int = -1
    abandoned: bool = False

    def acquire(self, wait: bool) -> bool:
        """Take the lock (waiting when ``wait``); False when busy (no wait) or abandoned meanwhile."""
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o666)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | (0 if wait else fcntl.LOCK_NB))
        except BlockingIOError:
            os.close(fd)
            return False
        except BaseException:
            os.close(fd)
            raise
        with self.guard:
            if self.abandoned:
                _unlock(fd)
                return False
            self.fd = fd
        return True

    def abandon(self) -> None:
        """Release the lock if held, and make a still-waiting ``acquire`` give it up at once."""
        with self.guard:
            self.abandoned = True
            fd, self.fd = self.fd, -1
        if fd >= 0:
            _unlock(fd)


def _unlock(fd: int) -> None:
    try:
        fcntl.flock(fd, fcntl.LOCK_UN)
    finally:
        os.close(fd)


def _make_and_acquire(waiter: FlockWaiter) -> bool:
    waiter.path.parent.mkdir(parents=True, exist_ok=True)
    return waiter.acquire(True)


@asynccontextmanager
async def hold_flock(path: Path) -> AsyncIterator[None]:
    """Hold ``path``'s ``flock`` for the body (its folder is created). Waiting is cancellable and
    never blocks the loop; the release is shielded, so a cancelled body still lets the next waiter in.
    """
    waiter = FlockWaiter(path)
    try:
        got = await blocking.run_sync("wait", partial(_make_and_acquire, waiter))
    except BaseException:
        waiter.abandon()
        raise
    if not got:  # abandoned concurrently: cannot happen without a cancellation, which raised above
        raise RuntimeError(f"{path}: lock abandoned")
    try:
        yield
    finally:
        with CancelScope(shield=True):
            await blocking.run_sync("files", waiter.abandon)

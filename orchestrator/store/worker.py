"""A dedicated thread that owns one SQLite connection (DECISIONS S26).

Why a thread of its own rather than ``anyio.to_thread.run_sync``: a ``sqlite3.Connection`` is bound to
the thread that made it, and the anyio thread pool hands work to whichever idle thread it has. So the
connection is *created* in the worker thread and every statement runs there, one job at a time from a
FIFO queue, which also serialises transactions without a lock.

How an async caller waits without blocking its loop, on trio and asyncio alike: the caller captures its
loop's token (``anyio.lowlevel.current_token``) and waits on an ``anyio.Event``; the worker, once the job
is done, sets that event through ``anyio.from_thread.run_sync(..., token=...)``. The wait is shielded
from cancellation: a job that has been handed to the worker always runs to the end (commit or rollback),
so a cancelled caller never leaves a half-known transaction behind; the cancellation is delivered at
the caller's next checkpoint.
"""

from __future__ import annotations

import queue
import sqlite3
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar, cast

import anyio
import anyio.from_thread
import anyio.lowlevel

__all__ = ["ConnectionWorker", "WorkerClosedError"]

T = TypeVar("T")


class WorkerClosedError(RuntimeError):
    """The store was closed; no more work is accepted."""


@dataclass
class _Job:
    fn: Callable[[sqlite3.Connection], Any]
    notify: Callable[[], None]
    result: Any = None
    error: BaseException | None = None
    done: threading.Event = field(default_factory=threading.Event)


_STOP = object()


class ConnectionWorker:
    """One thread, one connection, a queue of callables ``fn(conn) -> value``."""

    def __init__(self, path: Path, configure: Callable[[sqlite3.Connection], None]) -> None:
        self._path = path
        self._configure = configure
        self._queue: queue.SimpleQueue[Any] = queue.SimpleQueue()
        self._ready = threading.Event()
        self._open_error: BaseException | None = None
        self._closed = False
        self._thread = threading.Thread(target=self._main, name=f"sqlite-worker:{path.name}", daemon=True)

    async def start(self) -> None:
        """Start the thread and wait (off the loop) until the connection is open and configured."""
        self._thread.start()
        await anyio.to_thread.run_sync(self._ready.wait)
        if self._open_error is not None:
            raise self._open_error

    async def run(self, fn: Callable[[sqlite3.Connection], T]) -> T:
        """Run ``fn`` on the connection in the worker thread and return its result (or raise its error)."""
        if self._closed:
            raise WorkerClosedError("the store is closed")
        token = anyio.lowlevel.current_token()
        finished = anyio.Event()

        def notify() -> None:
            anyio.from_thread.run_sync(finished.set, token=token)

        job = _Job(fn=fn, notify=notify)
        self._queue.put(job)
        with anyio.CancelScope(shield=True):
            await finished.wait()
        if job.error is not None:
            raise job.error
        return cast(T, job.result)

    async def close(self) -> None:
        """Finish queued jobs, close the connection and join the thread. Idempotent."""
        if self._closed:
            return
        self._closed = True
        self._queue.put(_STOP)
        with anyio.CancelScope(shield=True):
            await anyio.to_thread.run_sync(self._thread.join)

    def _main(self) -> None:
        try:
            conn = sqlite3.connect(self._path, isolation_level=None, check_same_thread=True)
            self._configure(conn)
        except BaseException as exc:
            self._open_error = exc
            self._ready.set()
            return
        self._ready.set()
        try:
            while True:
                item = self._queue.get()
                if item is _STOP:
                    break
                job: _Job = item
                try:
                    job.result = job.fn(conn)
                except BaseException as exc:
                    if conn.in_transaction:
                        conn.rollback()
                    job.error = exc
                job.done.set()
                try:
                    job.notify()
                except BaseException:
                    # The waiting loop is gone; nobody is left to tell.
                    pass
        finally:
            conn.close()

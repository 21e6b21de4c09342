"""SQLite connections served by a small, bounded pool of lane threads (D8, relaxing S26).

A ``sqlite3.Connection`` is bound to the thread that made it, so each connection is pinned to one
lane, whose FIFO queue also serialises its transactions without a lock; a pool rather than a thread
per connection, so a thousand sessions do not hold a thousand threads. Jobs are served by the
caller's rank, then in order. A handed-over job always runs to the end (the caller's wait is
shielded), so a cancelled caller never leaves a half-known transaction. How lanes wake the caller's
loop, batched, on trio and asyncio, is in docs/architecture.md, "SQLite lanes"."""

from __future__ import annotations

import heapq
import itertools
import os
import queue
import sqlite3
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, Protocol, TypeVar, cast

import anyio
import sniffio

from orchestrator.base.blocking import Courier, courier, current_rank, refuse_abort
from orchestrator.store.records import StoreDamaged

__all__ = [
    "LANES_VARIABLE",
    "SQLITE_LANES",
    "ConnectionWorker",
    "WorkerClosedError",
    "connect",
    "lane_count",
    "read_only",
]

T = TypeVar("T")

SQLITE_LANES = 4
"""Threads serving every SQLite connection of the process; ``REVERIE_SQLITE_LANES`` overrides."""
LANES_VARIABLE = "REVERIE_SQLITE_LANES"


class WorkerClosedError(RuntimeError):
    """The store was closed; no more work is accepted."""


_BATCH_JOBS = 16
"""Jobs a lane may finish before it wakes the loops that wait for them."""
_BATCH_SECONDS = 0.001
"""...and for how long: a finished job's caller waits at most this plus one job's time longer."""


class _Job:
    """``action()`` runs in the lane; its result or error is kept for the waiting caller, whose loop
    is told through its ``courier`` by setting ``finished`` there."""

    __slots__ = ("action", "conn", "courier", "error", "finished", "result")

    def __init__(self, action: Callable[[], Any], conn: Callable[[], sqlite3.Connection | None]) -> None:
        self.action = action
        self.conn = conn
        self.finished: _Waker | None = None
        self.courier: Courier | None = None
        self.result: Any = None
        self.error: BaseException | None = None

    def execute(self) -> None:
        try:
            self.result = self.action()
        except BaseException as exc:
            conn = self.conn()
            if conn is not None and conn.in_transaction:
                conn.rollback()
            self.error = exc


class _Waker(Protocol):
    def set(self) -> None: ...


class _Reschedule:
    """Wakes a trio task sleeping in ``wait_task_rescheduled`` (run on its loop, like ``Event.set``)."""

    __slots__ = ("task",)

    def __init__(self, task: Any) -> None:
        self.task = task

    def set(self) -> None:
        # only the running backend's module
        import trio

        trio.lowlevel.reschedule(self.task)


def _wake(jobs: list[_Job]) -> None:
    """Tell each waiting loop, once, about all of its jobs in ``jobs`` (in their order), through its
    ``Courier`` (which also leaves the loop untold when a post to it is pending already)."""
    loops: dict[int, tuple[Courier, list[Callable[[], object]]]] = {}
    for job in jobs:
        if job.finished is None or job.courier is None:
            continue
        entry = loops.get(id(job.courier))
        if entry is None:
            entry = loops[id(job.courier)] = (job.courier, [])
        entry[1].append(job.finished.set)
    for loop, wakes in loops.values():
        loop.deliver(wakes)


class _Lane:
    """One daemon thread serving a heap of jobs ordered by (rank, submission); it lives as long as the
    process. The heap sits behind a plain lock and a ``SimpleQueue`` rings the bell, both in C, so
    handing a job over costs the loop little."""

    def __init__(self, index: int) -> None:
        self._heap: list[tuple[int, int, _Job]] = []
        self._lock = threading.Lock()
        self._bell: queue.SimpleQueue[None] = queue.SimpleQueue()
        self.connections = 0
        self.thread = threading.Thread(target=self._main, name=f"sqlite-lane-{index}", daemon=True)
        self.thread.start()

    def put(self, rank: int, job: _Job) -> None:
        with self._lock:
            heapq.heappush(self._heap, (rank, next(_order), job))
        self._bell.put(None)

    def _next(self) -> _Job:
        with self._lock:
            return heapq.heappop(self._heap)[2]

    def _main(self) -> None:
        while True:
            self._bell.get()
            job = self._next()
            job.execute()
            done = [job]
            deadline = time.perf_counter() + _BATCH_SECONDS
            while len(done) < _BATCH_JOBS and time.perf_counter() < deadline:
                try:
                    self._bell.get_nowait()
                except queue.Empty:
                    break
                job = self._next()
                job.execute()
                done.append(job)
            _wake(done)


_order = itertools.count()
_lanes: list[_Lane] = []
_lanes_lock = threading.Lock()


def lane_count() -> int:
    raw = os.environ.get(LANES_VARIABLE, "")
    return max(1, int(raw)) if raw.isdigit() else SQLITE_LANES


def _pick_lane() -> _Lane:
    """The lane serving the fewest connections, starting the pool on first use."""
    with _lanes_lock:
        if not _lanes:
            _lanes.extend(_Lane(i) for i in range(lane_count()))
        lane = min(_lanes, key=lambda candidate: candidate.connections)
        lane.connections += 1
        return lane


def _release_lane(lane: _Lane) -> None:
    with _lanes_lock:
        lane.connections -= 1


def _forget_lanes_after_fork() -> None:
    """A forked child has none of the parent's threads: it starts its own pool when it needs one."""
    global _lanes_lock
    _lanes.clear()
    _lanes_lock = threading.Lock()


os.register_at_fork(after_in_child=_forget_lanes_after_fork)


def connect(path: Path | str, *, read_only: bool = False) -> sqlite3.Connection:
    """The process's one way to open SQLite: autocommit (transactions are explicit), bound to the
    calling thread; ``read_only`` opens an existing file for reading only (``mode=ro``), and
    ``":memory:"`` a private in-memory database. Blocking."""
    target = f"{Path(path).resolve().as_uri()}?mode=ro" if read_only else path
    return sqlite3.connect(target, uri=read_only, isolation_level=None, check_same_thread=True)


def read_only(path: Path, fn: Callable[[sqlite3.Connection], T]) -> T:
    """``fn`` on a read-only connection to the store file ``path``, opened for this call and closed
    after (blocking; no lane): for a reader of a finished run's store, which must never change it.
    :class:`StoreDamaged` when the file cannot be opened or read."""
    try:
        conn = connect(path, read_only=True)
    except sqlite3.DatabaseError as exc:
        raise StoreDamaged(f"conversation store {path}: {exc}") from None
    try:
        return _translated(path, fn, conn)
    finally:
        conn.close()


def _translated(path: Path | str, fn: Callable[[sqlite3.Connection], T], conn: sqlite3.Connection) -> T:
    """``fn(conn)``, with the driver's ``DatabaseError`` turned into :class:`StoreDamaged` (the
    store's error translation: one line naming the file). A broken constraint or a malformed
    statement (``IntegrityError``, ``ProgrammingError``) is the store's own bug or the caller's
    domain error, so it goes up as the driver raised it (a traceback, or a ``StoreError`` from
    the job that expected it)."""
    try:
        return fn(conn)
    except (StoreDamaged, sqlite3.IntegrityError, sqlite3.ProgrammingError):
        raise
    except sqlite3.DatabaseError as exc:
        raise StoreDamaged(f"conversation store {path}: {exc}") from exc


class ConnectionWorker:
    """One connection pinned to one lane; ``run(fn)`` executes ``fn(conn)`` there."""

    def __init__(
        self,
        path: Path,
        configure: Callable[[sqlite3.Connection], None],
        create: Callable[[Path], bool] | None = None,
    ) -> None:
        """``create(path)`` runs in the lane before connecting (a new file can be seeded there, in
        the same hand-off as opening it); ``created`` keeps what it returned (True: it made the file)."""
        self._path = path
        self._configure = configure
        self._create = create
        self.created = False
        self._lane: _Lane | None = None
        self._conn: sqlite3.Connection | None = None
        self._closed = False
        self._rank = 0
        self.jobs = 0
        """Jobs handed to the lane so far, each one round trip from the loop and back."""

    async def start(self) -> None:
        """Open and configure the connection in its lane."""
        self._lane = _pick_lane()
        try:
            await self._submit(self._open)
        except BaseException:
            self._closed = True
            _release_lane(self._lane)
            raise

    def _open(self) -> None:
        if self._create is not None:
            self.created = self._create(self._path)
        conn = connect(self._path)
        try:
            self._configure(conn)
        except BaseException:
            conn.close()
            raise
        self._conn = conn

    async def run(self, fn: Callable[[sqlite3.Connection], T]) -> T:
        """Run ``fn`` on the connection in its lane and return its result (or raise its error; a
        ``sqlite3.DatabaseError`` it lets out is :class:`StoreDamaged`, naming the store's file)."""
        if self._closed or self._lane is None:
            raise WorkerClosedError("the store is closed")
        return await self._submit(lambda: _translated(self._path, fn, self._connection()))

    async def close(self) -> None:
        """Finish this connection's queued jobs, then close it. Idempotent."""
        if self._closed:
            return
        self._closed = True
        if self._lane is not None:
            try:
                await self._submit(self._shut, last=True)
            finally:
                _release_lane(self._lane)

    def _connection(self) -> sqlite3.Connection:
        if self._conn is None:
            raise WorkerClosedError("the store is closed")
        return self._conn

    def _rank_floor(self, rank: int) -> int:
        """A connection's jobs never overtake each other: each waits at least at the rank before it."""
        self._rank = max(self._rank, rank)
        return self._rank

    def _current(self) -> sqlite3.Connection | None:
        return self._conn

    def _shut(self) -> None:
        conn, self._conn = self._conn, None
        if conn is not None:
            conn.close()

    async def _submit(self, action: Callable[[], T], *, last: bool = False) -> T:
        assert self._lane is not None
        self.jobs += 1
        job = _Job(action, self._current)
        job.courier = courier()
        rank = sys.maxsize if last else self._rank_floor(current_rank())
        if sniffio.current_async_library() == "trio":
            # only the running backend's module
            import trio

            job.finished = _Reschedule(trio.lowlevel.current_task())
            self._lane.put(rank, job)
            await trio.lowlevel.wait_task_rescheduled(refuse_abort)
        else:
            finished = job.finished = anyio.Event()
            self._lane.put(rank, job)
            with anyio.CancelScope(shield=True):
                await finished.wait()
        if job.error is not None:
            raise job.error
        return cast(T, job.result)

"""The one way blocking work leaves the event loop (``run_sync``; SQLite alone has its own lanes,
``orchestrator.store.worker``): each kind behind its own limiter, served in the order of the
sessions that asked rather than in arrival order. ``tests/test_layers.py`` fails any other module
that hands work to a thread itself.

Why not ``anyio.to_thread.run_sync``: its one limiter serves everything in arrival order, so a
thousand sessions advance in lockstep and none finishes until all do (P4). Here ``git``, ``files``
and ``wait`` have limiters of their own, a waiter is served by rank (``ranked``) then arrival, and
the pool's own threads wake the caller through the loop's ``Courier``, cheaper per hop than anyio's.
The kinds, their sizes, cancellation and the wake-up path are in docs/architecture.md, "Blocking
work off the loop"."""

from __future__ import annotations

import contextvars
import heapq
import itertools
import os
import queue
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from functools import partial
from typing import Any, Literal, TypeVar, cast

import anyio
import anyio.lowlevel
import anyio.to_thread
import sniffio

__all__ = [
    "FILE_SLOTS",
    "GIT_SLOTS",
    "WAIT_SLOTS",
    "BlockingKind",
    "Courier",
    "FairLimiter",
    "courier",
    "current_rank",
    "limiter",
    "ranked",
    "refuse_abort",
    "run_sync",
]

T = TypeVar("T")

BlockingKind = Literal["git", "files", "wait"]

GIT_SLOTS = 4
"""Git processes (or in-process git work) at once: two cores gain nothing from more."""
FILE_SLOTS = 16
"""Short blocking calls at once: the file system, imports, small library calls."""
WAIT_SLOTS = 1000
"""Threads waiting on something outside reverie at once (a lock, stdin, an editor, a remote task)."""

_rank: contextvars.ContextVar[int] = contextvars.ContextVar("reverie_blocking_rank", default=0)


@contextmanager
def ranked(rank: int) -> Iterator[None]:
    """Work started inside (directly or by child tasks) waits for slots with this rank."""
    token = _rank.set(rank)
    try:
        yield
    finally:
        _rank.reset(token)


def current_rank() -> int:
    """The rank work started here waits with (SQLite lanes order their queues by it too)."""
    return _rank.get()


@dataclass(order=True)
class _Waiter:
    """A task waiting for a slot; ordered by rank, then arrival."""

    rank: int
    seq: int
    event: anyio.Event = field(compare=False)
    granted: bool = field(default=False, compare=False)
    gone: bool = field(default=False, compare=False)


class FairLimiter:
    """``total`` slots; waiters are served lowest rank first, then first come first served."""

    def __init__(self, total: int) -> None:
        if total < 1:
            raise ValueError(f"a limiter needs at least one slot, not {total}")
        self.total = total
        self.busy = 0
        self._waiting: list[_Waiter] = []
        self._seq = itertools.count()

    @property
    def waiting(self) -> int:
        return sum(not w.gone for w in self._waiting)

    async def acquire(self) -> None:
        if self.busy < self.total and not self._waiting:
            self.busy += 1
            await anyio.lowlevel.checkpoint()
            return
        waiter = _Waiter(_rank.get(), next(self._seq), anyio.Event())
        heapq.heappush(self._waiting, waiter)
        try:
            await waiter.event.wait()
        except BaseException:
            if waiter.granted:
                self.release()
            else:
                waiter.gone = True
            raise

    def release(self) -> None:
        while self._waiting:
            waiter = heapq.heappop(self._waiting)
            if not waiter.gone:
                waiter.granted = True
                waiter.event.set()
                return
        self.busy -= 1


def _slots(name: str, default: int) -> int:
    raw = os.environ.get(name, "")
    return max(1, int(raw)) if raw.isdigit() else default


_LIMITERS: anyio.lowlevel.RunVar[dict[BlockingKind, FairLimiter]] = anyio.lowlevel.RunVar("reverie_blocking")


def _sizes() -> dict[BlockingKind, int]:
    return {"git": _slots("REVERIE_GIT_SLOTS", GIT_SLOTS), "files": _slots("REVERIE_FILE_SLOTS", FILE_SLOTS)}


def limiter(kind: BlockingKind) -> FairLimiter:
    """The limiter of ``kind`` for the running event loop (its waiters hold loop-bound events)."""
    try:
        return _LIMITERS.get()[kind]
    except LookupError:
        made: dict[BlockingKind, FairLimiter] = {k: FairLimiter(n) for k, n in _sizes().items()}
        _LIMITERS.set(made)
        return made[kind]


class Courier:
    """Wakes the tasks of one event loop from other threads, the loop told once per batch: the first
    wake-up handed over while none is pending posts a drain to the loop (``run_sync_soon``: on trio a
    byte written to its wake-up socket, a system call made with the GIL let go and taken back), and
    those handed over before that drain runs ride along with it. At a thousand sessions the loop is
    rarely idle, so most finished jobs (the pool's here, the SQLite lanes') find a drain already
    posted. ``courier()`` is the running loop's."""

    def __init__(self, post: Callable[[Callable[[], None]], None]) -> None:
        self._post = post
        self._lock = threading.Lock()
        self._pending: list[Callable[[], object]] = []

    def deliver(self, wakes: list[Callable[[], object]]) -> None:
        """From any thread: run each of ``wakes`` on the loop, in order, soon."""
        with self._lock:
            first = not self._pending
            self._pending.extend(wakes)
        if first:
            try:
                self._post(self._drain)
            except BaseException:
                # The waiting loop is gone; nobody is left to tell.
                pass

    def _drain(self) -> None:
        with self._lock:
            pending, self._pending = self._pending, []
        failed: BaseException | None = None
        for wake in pending:
            try:
                wake()
            except BaseException as exc:  # the others still wake: a task left asleep would hang
                failed = failed or exc
        if failed is not None:
            raise failed


_COURIER: anyio.lowlevel.RunVar[Courier] = anyio.lowlevel.RunVar("reverie_courier")


def courier() -> Courier:
    """The running event loop's ``Courier`` (made on first use)."""
    try:
        return _COURIER.get()
    except LookupError:
        token = anyio.lowlevel.current_token()
        backend, native = token.backend_class, token.native_token
        made = Courier(lambda drain: backend.run_sync_soon(drain, (), native))
        _COURIER.set(made)
        return made


class _Job:
    """``fn`` run in ``context`` by a pool thread; its result or error is kept for the caller, whose
    loop is told through its ``courier`` by running ``wake`` there."""

    __slots__ = ("context", "courier", "error", "fn", "result", "wake")

    def __init__(self, fn: Callable[[], Any], wake: Callable[[], object]) -> None:
        self.fn = fn
        self.context = contextvars.copy_context()
        # the thread is not the loop: sniffio (and what asks it, anyio) must not say it is
        self.context.run(sniffio.current_async_library_cvar.set, None)
        self.courier = courier()
        self.wake = wake
        self.result: Any = None
        self.error: BaseException | None = None

    def execute(self) -> None:
        try:
            self.result = self.context.run(self.fn)
        except BaseException as exc:
            self.error = exc
        finally:
            del self.fn, self.context
        self.courier.deliver([self.wake])


class _Pool:
    """Daemon threads taking jobs from one queue, started when a job finds none idle (the limiters
    bound how many run at once); they live as long as the process."""

    def __init__(self) -> None:
        self._jobs: queue.SimpleQueue[_Job] = queue.SimpleQueue()
        self._lock = threading.Lock()
        self._idle = 0
        self._started = 0

    def put(self, job: _Job) -> None:
        with self._lock:
            start = self._idle == 0
            if start:
                self._started += 1
            else:
                self._idle -= 1
        self._jobs.put(job)
        if start:
            threading.Thread(target=self._main, name=f"reverie-blocking-{self._started}", daemon=True).start()

    def _main(self) -> None:
        while True:
            job = self._jobs.get()
            job.execute()
            del job
            with self._lock:
                self._idle += 1


_pool = _Pool()


def _forget_pool_after_fork() -> None:
    """A forked child has none of the parent's threads: it starts its own as it needs them."""
    global _pool
    _pool = _Pool()


os.register_at_fork(after_in_child=_forget_pool_after_fork)


def refuse_abort(_raise_cancel: Any) -> Any:
    """For trio's ``wait_task_rescheduled``: a job handed to another thread (a pool thread, a SQLite
    lane) is waited for to its end, and the cancellation waits for the caller's next checkpoint."""
    # only the running backend's module
    import trio

    return trio.lowlevel.Abort.FAILED


async def _in_thread(fn: Callable[[], T]) -> T:
    """``fn()`` in a pool thread, waited for to its end (see the module docstring)."""
    if sniffio.current_async_library() == "trio":
        # only the running backend's module
        import trio

        job = _Job(fn, partial(trio.lowlevel.reschedule, trio.lowlevel.current_task()))
        _pool.put(job)
        await trio.lowlevel.wait_task_rescheduled(refuse_abort)
    else:
        finished = anyio.Event()
        job = _Job(fn, finished.set)
        _pool.put(job)
        with anyio.CancelScope(shield=True):
            await finished.wait()
    if job.error is not None:
        raise job.error
    return cast(T, job.result)


_WAIT_LIMITER: anyio.lowlevel.RunVar[anyio.CapacityLimiter] = anyio.lowlevel.RunVar("reverie_blocking_wait")


def _wait_limiter() -> anyio.CapacityLimiter:
    try:
        return _WAIT_LIMITER.get()
    except LookupError:
        made = anyio.CapacityLimiter(_slots("REVERIE_WAIT_SLOTS", WAIT_SLOTS))
        _WAIT_LIMITER.set(made)
        return made


async def run_sync(kind: BlockingKind, fn: Callable[[], T]) -> T:
    """Run ``fn()`` in a worker thread once a ``kind`` slot is free (see the module docstring).

    ``git`` and ``files`` jobs run to their end, a cancelled caller hearing of it at its next
    checkpoint. A ``wait`` job (blocked on something outside reverie for as long as that takes)
    is *abandoned* by a cancelled caller: ``fn`` must make that safe (``FlockWaiter`` gives up a lock
    it gets afterwards; a killed process group ends the bash tool's wait). It runs in anyio's threads
    behind a limiter of its own, so a wait never holds a slot that the work it waits for needs."""
    if kind == "wait":
        return await anyio.to_thread.run_sync(fn, abandon_on_cancel=True, limiter=_wait_limiter())
    slots = limiter(kind)
    await slots.acquire()
    try:
        return await _in_thread(fn)
    finally:
        slots.release()

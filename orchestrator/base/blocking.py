"""Blocking work (git, files) off the event loop, each kind behind its own limiter, served in the
order of the sessions that asked rather than in arrival order.

Why not ``anyio.to_thread.run_sync`` alone: its default limiter is 40 threads shared by everything, in
arrival order. With a thousand sessions each step of every session queues behind everyone's previous
step, so all of them advance in lockstep and none finishes until all do (issue 14). Here:

* each kind has its own limiter, sized for the job: ``git`` runs processes that compete for the
  cores, so a few at a time (``GIT_SLOTS``); ``files`` is short reads and writes (``FILE_SLOTS``).
  SQLite has its own lanes (``orchestrator.store.worker``). ``REVERIE_GIT_SLOTS`` and
  ``REVERIE_FILE_SLOTS`` override the sizes;
* a waiter is served by *rank* (lower first), then in arrival order. ``ranked(n)`` sets the rank for
  the current task and every task it starts; the batch executor gives each task its suite index, so
  sessions that started first finish first, and later ones wait instead of crowding in. Work
  outside any ``ranked`` block has rank 0.

A job handed to its thread runs to the end (the thread is not abandoned on cancellation, as with
``anyio.to_thread``); a caller cancelled while still waiting for a slot gives the slot up.
"""

from __future__ import annotations

import contextvars
import heapq
import itertools
import os
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Literal, TypeVar

import anyio
import anyio.lowlevel
import anyio.to_thread

__all__ = ["FILE_SLOTS", "GIT_SLOTS", "BlockingKind", "FairLimiter", "current_rank", "limiter", "ranked", "run_sync"]

T = TypeVar("T")

BlockingKind = Literal["git", "files"]

GIT_SLOTS = 4
"""Git processes (or in-process git work) at once: two cores gain nothing from more."""
FILE_SLOTS = 16
"""File-system jobs at once."""

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
_THREADS: anyio.lowlevel.RunVar[anyio.CapacityLimiter] = anyio.lowlevel.RunVar("reverie_blocking_threads")


def _sizes() -> dict[BlockingKind, int]:
    return {"git": _slots("REVERIE_GIT_SLOTS", GIT_SLOTS), "files": _slots("REVERIE_FILE_SLOTS", FILE_SLOTS)}


def limiter(kind: BlockingKind) -> FairLimiter:
    """The limiter of ``kind`` for the running event loop (its waiters hold loop-bound events)."""
    try:
        return _LIMITERS.get()[kind]
    except LookupError:
        sizes = _sizes()
        made: dict[BlockingKind, FairLimiter] = {k: FairLimiter(n) for k, n in sizes.items()}
        _LIMITERS.set(made)
        # Threads are not the bound here (the fair limiters are): one for every slot of every kind.
        _THREADS.set(anyio.CapacityLimiter(sum(sizes.values())))
        return made[kind]


async def run_sync(kind: BlockingKind, fn: Callable[[], T]) -> T:
    """Run ``fn()`` in a worker thread once a ``kind`` slot is free (see the module docstring)."""
    slots = limiter(kind)
    await slots.acquire()
    try:
        return await anyio.to_thread.run_sync(fn, limiter=_THREADS.get(), abandon_on_cancel=False)
    finally:
        slots.release()

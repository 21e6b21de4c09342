"""The supervisor: owns every task a process starts (turns, reflection and compaction subagents)
in one anyio task group, serializes turns per conversation, and keeps subagent failures away from
the main agent's turns.

Turns of one conversation run one at a time (TURN-1.2 rule 1), also across processes:
an in-process lock queues this process's turns fairly, then a ``flock`` beside the store
(``<store>.locks/<conversation>.lock``) makes two ``reverie chat -p`` on one conversation take
turns instead of interleaving their messages. The lock file stays open while the supervisor
lives, so a turn takes and releases its ``flock`` with one non-blocking call each on the loop (no
thread hop per turn); only a lock another process holds is waited for in a thread (``hold_flock``).
Turns of different conversations and agents run concurrently. Subagents are children of the supervisor's task group,
limited by a capacity limiter; a failing subagent is recorded and reported, never raised into a
turn. Leaving the ``open`` context cancels what is still running, with ``leaving`` set first: a
subagent cut short by its session's end records itself ``interrupted`` (kept for the next session,
L2), never ``failed``, and cleans up its own worktree in a shielded ``finally``. Before that a front
end may ``wait_out`` the subagents still running, each for the rest of its time limit.

The supervisor never names a subagent (D9): it runs whatever after-turn hooks and spawned tasks the
composition root gives it, through the interfaces of ``orchestrator.runtime.plugins``.
"""

from __future__ import annotations

import fcntl
import math
import os
import weakref
from collections import defaultdict
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any

import anyio
import anyio.lowlevel
from anyio.abc import TaskGroup

from orchestrator.agent.turn import Observer, TurnOutcome, TurnRunner
from orchestrator.base import blocking
from orchestrator.base.config import Settings
from orchestrator.base.events import LockWaiting
from orchestrator.base.flock import hold_flock
from orchestrator.runtime.plugins import AfterTurnHook
from orchestrator.store import Store

__all__ = ["DEFAULT_PROCESS_SUBAGENTS", "DEFAULT_SUBAGENT_CAPACITY", "Running", "Supervisor", "process_capacity"]

DEFAULT_SUBAGENT_CAPACITY: int = Settings.max_subagents
DEFAULT_PROCESS_SUBAGENTS: int = Settings.max_process_subagents
_PROCESS: weakref.WeakKeyDictionary[object, anyio.CapacityLimiter] = weakref.WeakKeyDictionary()
_GRACE = 5.0
"""How long past its time limit ``wait_out`` still waits for a subagent: the limit stops it, then
it records its outcome and cleans up."""
_QUEUED = "another reverie process is running a turn of this conversation; this turn waits for it"


@dataclass(frozen=True)
class Running:
    """A subagent task still running: its name (``reflection <id>``) and the seconds left of its time
    limit (None: it has none)."""

    name: str
    seconds_left: float | None


def process_capacity(total: int | None) -> anyio.CapacityLimiter:
    """The limiter every supervisor on this event loop shares: one process runs at most ``total``
    background subagents at once, however many sessions it holds (a batch run's tasks; B2). Its size
    is the last one given (None keeps it; a new loop starts at ``DEFAULT_PROCESS_SUBAGENTS``)."""
    loop = anyio.lowlevel.current_token().native_token
    limiter = _PROCESS.get(loop)
    if limiter is None:
        limiter = _PROCESS[loop] = anyio.CapacityLimiter(total or DEFAULT_PROCESS_SUBAGENTS)
    elif total is not None:
        limiter.total_tokens = total
    return limiter


class Supervisor:
    """Owner of a session's turns and background tasks (see the module docstring); a ``Spawner``.

    ``open`` is the only way to get one: leaving it cancels every child still running. ``failures``
    lists the one-line reports of contained failures, oldest first, for the caller to show.
    """

    def __init__(
        self, store: Store, task_group: TaskGroup, observer: Observer | None, capacity: int,
        process: anyio.CapacityLimiter | None = None,
    ) -> None:
        self.store = store
        self._tg = task_group
        self.observer = observer
        self._locks: defaultdict[str, anyio.Lock] = defaultdict(anyio.Lock)
        self.capacity = anyio.CapacityLimiter(capacity)
        self.process = process or process_capacity(None)
        self._running = 0
        self._idle = anyio.Event()
        self._idle.set()
        self.failures: list[str] = []
        self.after_turn_hooks: list[AfterTurnHook] = []
        self._lock_fds: dict[str, int] = {}
        self._held: set[str] = set()
        self._closed = False
        self._children: dict[int, tuple[str, float | None]] = {}
        self._spawned = 0
        self.leaving = False
        """The session is ending: a subagent cancelled now was interrupted, not failed (L2)."""

    @classmethod
    @asynccontextmanager
    async def open(
        cls, store: Store, *, observer: Observer | None = None, capacity: int = DEFAULT_SUBAGENT_CAPACITY,
        process_capacity_total: int | None = None,
    ) -> AsyncIterator[Supervisor]:
        """``capacity``: subagents this supervisor runs at once; ``process_capacity_total``: those every
        supervisor of the process runs at once (:func:`process_capacity`; None keeps its size)."""
        async with anyio.create_task_group() as tg:
            supervisor = cls(store, tg, observer, capacity, process_capacity(process_capacity_total))
            try:
                yield supervisor
            finally:
                supervisor.leaving = True
                tg.cancel_scope.cancel()
                supervisor._close_lock_files()

    @property
    def running(self) -> int:
        """Subagent tasks still running."""
        return self._running

    def conversation_lock(self, conversation_id: str) -> anyio.Lock:
        return self._locks[conversation_id]

    async def run_turn(
        self, runner: TurnRunner, conversation_id: str, text: str, *, at: str | None = None, recorded: str | None = None
    ) -> TurnOutcome:
        """One turn under the conversation's lock, then the after-turn hooks (reflection triggers);
        ``at`` and ``recorded`` as ``TurnRunner.run_turn`` takes them (a replayed exchange).

        A failing hook is recorded like a failed subagent (``failures`` and a ``subagent.failed`` event
        named ``after-turn:<hook>``) and never changes the turn's result (TURN-1.2 rule 6): the
        turn and its post-turn sync are already done.
        """
        async with self.conversation_lock(conversation_id), self._turn_flock(conversation_id):
            outcome = await runner.run_turn(conversation_id, text, at=at, recorded=recorded)
        for hook in list(self.after_turn_hooks):
            try:
                await hook(runner, outcome)
            except Exception as exc:
                name = f"after-turn:{getattr(hook, '__qualname__', type(hook).__name__)}"
                detail = next((line.strip() for line in str(exc).splitlines() if line.strip()), "")
                message = f"{name} failed: {type(exc).__name__}: {detail}"
                self.failures.append(message)
                with anyio.CancelScope(shield=True):
                    await self.store.record_event(
                        "subagent.failed", {"name": name, "error": message}, conversation_id=conversation_id
                    )
        return outcome

    @asynccontextmanager
    async def _turn_flock(self, conversation_id: str) -> AsyncIterator[None]:
        """The conversation's cross-process ``flock`` (module docstring); the caller holds its
        in-process lock, so this process never contends with itself for the open file."""
        lock_file = self.store.path.with_name(f"{self.store.path.name}.locks") / f"{conversation_id}.lock"
        fd = self._lock_fds.get(conversation_id)
        if fd is None and not self._closed:
            fd = await blocking.run_sync("files", partial(_open_lock_file, lock_file))
            self._lock_fds[conversation_id] = fd
        try:
            if fd is None:
                raise BlockingIOError
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            if self.observer is not None:
                await self.observer(LockWaiting("conversation", _QUEUED))
            async with hold_flock(lock_file):
                yield
            return
        self._held.add(conversation_id)
        try:
            yield
        finally:
            fcntl.flock(fd, fcntl.LOCK_UN)
            self._held.discard(conversation_id)
            if self._closed:
                os.close(self._lock_fds.pop(conversation_id))

    def _close_lock_files(self) -> None:
        """Close the lock files no turn holds; a turn still running closes its own when it ends."""
        self._closed = True
        for conversation_id in [c for c in self._lock_fds if c not in self._held]:
            os.close(self._lock_fds.pop(conversation_id))

    def spawn(self, name: str, fn: Callable[[], Awaitable[Any]], *, seconds: float | None = None) -> None:
        """Start a subagent task as a child of the supervisor; its failure is contained. ``seconds``
        is its time limit, counted from now (what ``wait_out`` gives it at most)."""
        self._running += 1
        self._idle = anyio.Event() if self._running == 1 else self._idle
        key = self._spawned = self._spawned + 1
        self._children[key] = (name, None if seconds is None else anyio.current_time() + seconds)

        async def child() -> None:
            try:
                async with self.capacity, self.process:
                    await self._contained(name, fn)
            finally:
                self._children.pop(key, None)
                self._running -= 1
                if self._running == 0:
                    self._idle.set()

        self._tg.start_soon(child, name=name)

    def watch(self, name: str, fn: Callable[[], Awaitable[Any]]) -> None:
        """Start a wait that is not subagent work (reflection's idle timer): ``running`` does not
        count it and ``drain`` does not wait for it, so a one-shot chat ends without it; closing the
        supervisor cancels it. A failure is contained as a subagent's is."""
        self._tg.start_soon(self._contained, name, fn, name=name)

    async def _contained(self, name: str, fn: Callable[[], Awaitable[Any]]) -> None:
        try:
            await fn()
        except anyio.get_cancelled_exc_class():
            raise
        except Exception as exc:
            message = f"{name} failed: {type(exc).__name__}: {exc}"
            self.failures.append(message)
            with anyio.CancelScope(shield=True):
                await self.store.record_event("subagent.failed", {"name": name, "error": message})

    def still_running(self) -> list[Running]:
        """The subagent tasks running now, the one with the most time left first."""
        now = anyio.current_time()
        running = [Running(name, None if end is None else max(0.0, end - now)) for name, end in self._children.values()]
        return sorted(running, key=lambda r: -(math.inf if r.seconds_left is None else r.seconds_left))

    async def wait_out(self, show: Callable[[list[Running]], None], stop: anyio.Event) -> bool:
        """Leaving (L2): wait until no subagent runs (True), each at most for the rest of its time
        limit, calling ``show`` with what still runs at the start and once a second; False when
        ``stop`` is set first (the user leaves it for next time) or a time limit has run out, and
        what still runs is then ``interrupted`` when the supervisor closes."""
        while not self._idle.is_set():
            ends = [end for _, end in self._children.values()]
            if ends and None not in ends and anyio.current_time() > max(e for e in ends if e is not None) + _GRACE:
                return False
            running = self.still_running()
            if running:
                show(running)
            with anyio.move_on_after(1.0):
                async with anyio.create_task_group() as tg:

                    async def first(event: anyio.Event) -> None:
                        await event.wait()
                        tg.cancel_scope.cancel()

                    tg.start_soon(first, self._idle)
                    tg.start_soon(first, stop)
            if stop.is_set():
                return False
        return True

    async def drain(self, seconds: float = math.inf) -> bool:
        """Wait until no subagent runs (True) or ``seconds`` pass (False)."""
        if self._idle.is_set():
            return True  # the common case of a one-shot turn: no deadline scope to set up
        with anyio.move_on_after(seconds):
            await self._idle.wait()
            return True
        return False


def _open_lock_file(path: Path) -> int:
    path.parent.mkdir(parents=True, exist_ok=True)
    return os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o666)

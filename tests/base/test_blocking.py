"""Blocking work behind fair, per-kind limiters: lower rank first, then arrival order; a cancelled
waiter gives its place up; a slot is never lost."""

from __future__ import annotations

import threading
from functools import partial

import anyio
import anyio.lowlevel
import anyio.to_thread
import pytest

from orchestrator.base import blocking
from orchestrator.base.blocking import FairLimiter, ranked
from tests.support import wait_until

pytestmark = pytest.mark.anyio


async def test_waiters_are_served_by_rank_then_in_arrival_order() -> None:
    slots = FairLimiter(1)
    served: list[str] = []
    await slots.acquire()

    async def wait(name: str, rank: int) -> None:
        with ranked(rank):
            await slots.acquire()
        served.append(name)
        slots.release()

    async with anyio.create_task_group() as tg:
        for name, rank in (("late-a", 5), ("early", 1), ("late-b", 5), ("first", 0)):
            tg.start_soon(wait, name, rank)
            await anyio.wait_all_tasks_blocked()
        slots.release()
    assert served == ["first", "early", "late-a", "late-b"]
    assert slots.busy == 0 and slots.waiting == 0


async def test_a_cancelled_waiter_gives_its_place_up_and_no_slot_is_lost() -> None:
    slots = FairLimiter(1)
    await slots.acquire()
    got: list[str] = []

    async def wait(name: str) -> None:
        await slots.acquire()
        got.append(name)
        slots.release()

    async with anyio.create_task_group() as tg:
        inner = anyio.CancelScope()

        async def cancelled() -> None:
            with inner:
                await slots.acquire()
                got.append("never")

        tg.start_soon(cancelled)
        await anyio.wait_all_tasks_blocked()
        tg.start_soon(wait, "kept")
        await anyio.wait_all_tasks_blocked()
        inner.cancel()
        await anyio.wait_all_tasks_blocked()
        slots.release()
    assert got == ["kept"]
    assert slots.busy == 0 and slots.waiting == 0


async def test_run_sync_runs_in_a_thread_within_its_kinds_slots(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("REVERIE_GIT_SLOTS", "2")
    peak = 0
    running = 0
    lock = threading.Lock()
    loop_thread = threading.get_ident()
    release = threading.Event()

    def work() -> int:
        nonlocal peak, running
        with lock:
            running += 1
            peak = max(peak, running)
        release.wait(60)
        with lock:
            running -= 1
        return threading.get_ident()

    results: list[int] = []

    async def one() -> None:
        results.append(await blocking.run_sync("git", work))

    async with anyio.create_task_group() as tg:
        for _ in range(6):
            tg.start_soon(one)
        slots = blocking.limiter("git")
        await anyio.to_thread.run_sync(
            partial(wait_until, lambda: (running, slots.busy, slots.waiting) == (2, 2, 4), timeout=60, what="2 running, 4 waiting")
        )
        release.set()
    assert peak == 2 and len(results) == 6 and loop_thread not in results


async def test_run_sync_sees_the_callers_context_but_not_the_loop_and_raises_the_jobs_error() -> None:
    import contextvars

    import sniffio

    var: contextvars.ContextVar[str] = contextvars.ContextVar("test_blocking_var", default="unset")
    var.set("caller's")

    def look() -> tuple[str, str | None]:
        try:
            library: str | None = sniffio.current_async_library()
        except sniffio.AsyncLibraryNotFoundError:
            library = None
        return var.get(), library

    assert await blocking.run_sync("files", look) == ("caller's", None)

    def fail() -> None:
        raise KeyError("from the thread")

    with pytest.raises(KeyError, match="from the thread"):
        await blocking.run_sync("files", fail)
    assert blocking.limiter("files").busy == 0


async def test_a_caller_cancelled_while_its_job_runs_waits_for_the_job_and_then_is_cancelled() -> None:
    started = threading.Event()
    release = threading.Event()
    finished: list[str] = []
    after: list[str] = []

    def work() -> str:
        started.set()
        release.wait(60)
        finished.append("job")
        return "done"

    async def call(scope: anyio.CancelScope) -> None:
        with scope:
            got = await blocking.run_sync("git", work)
            after.append(got)  # the result still arrives: the cancellation waits for a checkpoint
            await anyio.lowlevel.checkpoint()
            after.append("never")

    scope = anyio.CancelScope()
    async with anyio.create_task_group() as tg:
        tg.start_soon(call, scope)
        await anyio.to_thread.run_sync(started.wait, 60)
        scope.cancel()
        await anyio.wait_all_tasks_blocked()
        assert finished == []
        release.set()
    assert finished == ["job"] and after == ["done"]
    assert blocking.limiter("git").busy == 0


def test_a_courier_posts_once_for_the_wake_ups_handed_over_before_its_drain_runs() -> None:
    posted: list[object] = []
    courier = blocking.Courier(posted.append)
    ran: list[int] = []
    courier.deliver([lambda: ran.append(1)])
    courier.deliver([lambda: ran.append(2), lambda: ran.append(3)])
    assert len(posted) == 1 and ran == []
    drain = posted[0]
    assert callable(drain)
    drain()
    assert ran == [1, 2, 3]
    courier.deliver([lambda: ran.append(4)])
    assert len(posted) == 2, "after a drain the next wake-up posts again"
    second = posted[1]
    assert callable(second)
    second()
    assert ran == [1, 2, 3, 4]


def test_a_courier_whose_loop_is_gone_drops_the_wake_ups_quietly() -> None:
    def gone(_drain: object) -> None:
        raise RuntimeError("the loop is closed")

    blocking.Courier(gone).deliver([lambda: None])


async def test_jobs_finishing_together_in_many_threads_all_wake_their_callers() -> None:
    barrier = threading.Barrier(8, timeout=5)

    def work(n: int) -> int:
        barrier.wait()
        return n * n

    results: list[int] = []

    async def one(n: int) -> None:
        results.append(await blocking.run_sync("files", lambda: work(n)))

    async with anyio.create_task_group() as tg:
        for n in range(8):
            tg.start_soon(one, n)
    assert sorted(results) == [n * n for n in range(8)]


def test_a_wake_up_that_fails_does_not_keep_the_others_asleep() -> None:
    posted: list[object] = []
    courier = blocking.Courier(posted.append)
    ran: list[int] = []

    def broken() -> None:
        raise LookupError("no such task")

    courier.deliver([lambda: ran.append(1), broken, lambda: ran.append(3)])
    drain = posted[0]
    assert callable(drain)
    with pytest.raises(LookupError):
        drain()
    assert ran == [1, 3]

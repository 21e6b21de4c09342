"""The supervisor's way out (L2): what still runs, with the time its limit leaves it; a wait that a
stop ends or that ends with the work; ``leaving`` set before the close cancels anything."""

from __future__ import annotations

from pathlib import Path

import anyio
import pytest

from orchestrator.runtime.supervisor import DEFAULT_PROCESS_SUBAGENTS, Running, Supervisor
from orchestrator.store import Store

pytestmark = pytest.mark.anyio


async def test_wait_out_shows_what_runs_with_its_time_left_and_ends_on_stop_or_when_it_finishes(tmp_path: Path) -> None:
    gate = anyio.Event()
    async with Store.opened(tmp_path / "s.sqlite3") as store, Supervisor.open(store) as supervisor:
        supervisor.spawn("reflection r-1", gate.wait, seconds=30)
        supervisor.spawn("compaction c-1", gate.wait)
        shown: list[list[Running]] = []
        stop = anyio.Event()

        def show(running: list[Running]) -> None:
            shown.append(running)
            stop.set()

        assert await supervisor.wait_out(show, stop) is False, "the stop ends the wait"
        unlimited, limited = shown[0]
        assert (unlimited.name, unlimited.seconds_left) == ("compaction c-1", None)
        assert limited.name == "reflection r-1" and 29 < limited.seconds_left <= 30
        assert supervisor.running == 2, "stopping the wait stops nothing"

        def release(running: list[Running]) -> None:
            gate.set()

        assert await supervisor.wait_out(release, anyio.Event()) is True
        assert supervisor.running == 0 and supervisor.still_running() == []


async def test_closing_sets_leaving_before_it_cancels_what_still_runs(tmp_path: Path) -> None:
    started = anyio.Event()
    saw: list[bool] = []

    async def forever(supervisor: Supervisor) -> None:
        try:
            started.set()
            await anyio.sleep_forever()
        finally:
            saw.append(supervisor.leaving)

    async with Store.opened(tmp_path / "s.sqlite3") as store:
        async with Supervisor.open(store) as supervisor:
            assert supervisor.leaving is False
            supervisor.spawn("reflection r-2", lambda: forever(supervisor))
            await started.wait()
    assert saw == [True]


async def test_the_process_cap_holds_across_supervisors_of_one_process(tmp_path: Path) -> None:
    """``[limits] process_subagents`` (B2): two sessions' supervisors, each with room for two, run
    one subagent at a time when the process allows one; the second starts when the first ends."""
    order: list[str] = []
    gates = {"a": anyio.Event(), "b": anyio.Event()}
    started = {"a": anyio.Event(), "b": anyio.Event()}

    async def job(name: str) -> None:
        order.append(f"start {name}")
        started[name].set()
        await gates[name].wait()
        order.append(f"end {name}")

    async with (
        Store.opened(tmp_path / "s.sqlite3") as store,
        Supervisor.open(store, capacity=2, process_capacity_total=1) as first,
        Supervisor.open(store, capacity=2) as second,
    ):
        assert first.process is second.process and first.process.total_tokens == 1
        first.spawn("reflection a", lambda: job("a"))
        await started["a"].wait()
        second.spawn("reflection b", lambda: job("b"))
        await anyio.wait_all_tasks_blocked()
        assert order == ["start a"] and second.running == 1, "b waits for the process's one place"
        gates["a"].set()
        await started["b"].wait()
        gates["b"].set()
        await second.drain()
    assert order == ["start a", "end a", "start b", "end b"]


async def test_each_event_loop_has_its_own_process_cap_sized_by_the_last_session(tmp_path: Path) -> None:
    async with Store.opened(tmp_path / "s.sqlite3") as store, Supervisor.open(store) as supervisor:
        assert supervisor.process.total_tokens == DEFAULT_PROCESS_SUBAGENTS
        async with Supervisor.open(store, process_capacity_total=3) as other:
            assert other.process is supervisor.process and supervisor.process.total_tokens == 3

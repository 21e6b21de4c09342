"""The supervisor's way out (L2): what still runs, with the time its limit leaves it; a wait that a
stop ends or that ends with the work; ``leaving`` set before the close cancels anything."""

from __future__ import annotations

from pathlib import Path

import anyio
import pytest

from orchestrator.runtime.supervisor import Running, Supervisor
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

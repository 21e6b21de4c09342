"""``batch_environment``: what a batch process sets for its tasks and gives back afterwards."""

from __future__ import annotations

import gc
import os
from pathlib import Path

import anyio
import pytest

from orchestrator.batch.eventlog import read_events
from orchestrator.batch.runner import BATCH_GC_THRESHOLDS, _EventPump, batch_environment, batch_sqlite_lanes
from orchestrator.store.schema import STORE_SYNC_VARIABLE
from orchestrator.store.worker import LANES_VARIABLE, SQLITE_LANES

pytestmark = pytest.mark.anyio


@pytest.mark.parametrize("processes", [1, 2, 3, 64])
def test_each_process_gets_the_lanes_its_share_of_the_cores_can_use(processes: int) -> None:
    cores = os.cpu_count() or 1
    lanes = batch_sqlite_lanes(processes)
    assert 1 <= lanes <= SQLITE_LANES
    assert lanes == max(1, min(SQLITE_LANES, cores // processes))
    assert lanes * processes <= max(cores, processes), "no more lanes than cores, beyond one per process"


def test_the_environment_is_set_for_the_run_and_given_back(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(LANES_VARIABLE, raising=False)
    monkeypatch.setenv("REVERIE_HOME", "/somewhere/else")
    with batch_environment(tmp_path / "run", processes=2):
        assert os.environ["REVERIE_HOME"] == str((tmp_path / "run" / "home").resolve())
        assert os.environ[STORE_SYNC_VARIABLE] == "off"
        assert os.environ[LANES_VARIABLE] == str(batch_sqlite_lanes(2))
    assert os.environ["REVERIE_HOME"] == "/somewhere/else"
    assert LANES_VARIABLE not in os.environ and STORE_SYNC_VARIABLE not in os.environ


def test_the_collector_runs_less_often_during_the_run_and_as_before_afterwards(tmp_path: Path) -> None:
    before = gc.get_threshold()
    assert BATCH_GC_THRESHOLDS[0] > before[0]
    with pytest.raises(RuntimeError), batch_environment(tmp_path / "run"):
        assert gc.get_threshold() == BATCH_GC_THRESHOLDS
        raise RuntimeError("a run that fails still gives the thresholds back")
    assert gc.get_threshold() == before


def test_a_lane_count_the_user_chose_is_kept(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(LANES_VARIABLE, "3")
    with batch_environment(tmp_path / "run", processes=2):
        assert os.environ[LANES_VARIABLE] == "3"
    assert os.environ[LANES_VARIABLE] == "3"


async def test_the_event_log_is_appended_at_most_once_a_second_and_always_at_the_end(tmp_path: Path) -> None:
    heard: list[str] = []

    async def sink(task_id: str, kind: str, payload: object) -> None:
        heard.append(kind)

    async def logged(field: str = "kind") -> list[object]:
        records = await anyio.to_thread.run_sync(lambda: read_events(tmp_path, task="t"))
        return [getattr(r, field) for r in records]

    path = tmp_path / "events" / "t.jsonl"
    pump = _EventPump("t", path, sink)
    await pump.local("turn.one", {}, "2026-01-01T00:00:00Z")
    assert heard == ["turn.one"] and await logged() == ["turn.one"]
    pump._pending.append(pump.first("turn.two", {}, "2026-01-01T00:00:01Z")[0])
    await pump.flush()
    assert heard == ["turn.one", "turn.two"], "progress hears of every flush at once"
    assert await logged() == ["turn.one"], "the log waits for a second to pass"
    pump._written_at -= 2
    pump._pending.append(pump.first("turn.three", {}, "2026-01-01T00:00:02Z")[0])
    await pump.flush()
    assert await logged() == ["turn.one", "turn.two", "turn.three"]
    await pump.local("task.end", {}, "2026-01-01T00:00:03Z")
    assert await logged("seq") == [1, 2, 3, 4]


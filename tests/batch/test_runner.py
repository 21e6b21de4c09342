"""A task's home (``run_home``) and what a batch process tunes for itself (``batch_process``)."""

from __future__ import annotations

import gc
import os
from pathlib import Path

import anyio
import pytest

from orchestrator.base.paths import current_home, using_home
from orchestrator.batch.eventlog import read_events
from orchestrator.batch.runner import (
    BATCH_GC_THRESHOLDS,
    RunOptions,
    _EventPump,
    batch_process,
    batch_sqlite_lanes,
    run_home,
    run_task,
    task_paths,
)
from orchestrator.batch.suite import parse_task
from orchestrator.memfs.history import changes
from orchestrator.store.schema import STORE_SYNC_VARIABLE, batch_store
from orchestrator.store.worker import LANES_VARIABLE, SQLITE_LANES
from tests.batch.helpers import two_sessions_an_hour_apart

pytestmark = pytest.mark.anyio


@pytest.mark.parametrize("processes", [1, 2, 3, 64])
def test_each_process_gets_the_lanes_its_share_of_the_cores_can_use(processes: int) -> None:
    cores = os.cpu_count() or 1
    lanes = batch_sqlite_lanes(processes)
    assert 1 <= lanes <= SQLITE_LANES
    assert lanes == max(1, min(SQLITE_LANES, cores // processes))
    assert lanes * processes <= max(cores, processes), "no more lanes than cores, beyond one per process"


def test_a_task_runs_in_the_run_home_and_the_process_environment_is_untouched(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("REVERIE_HOME", "/somewhere/else")
    before = dict(os.environ)
    home = run_home(tmp_path / "run")
    assert home.root == (tmp_path / "run" / "home").resolve() and home.scratch
    with using_home(home):
        assert current_home() == home and batch_store()
    assert dict(os.environ) == before and current_home().root == Path("/somewhere/else")
    assert not batch_store()


def test_a_batch_process_gets_its_lanes_and_gives_them_back(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(LANES_VARIABLE, raising=False)
    with batch_process(2):
        assert os.environ[LANES_VARIABLE] == str(batch_sqlite_lanes(2))
    assert LANES_VARIABLE not in os.environ and STORE_SYNC_VARIABLE not in os.environ


def test_the_collector_runs_less_often_during_the_run_and_as_before_afterwards() -> None:
    before = gc.get_threshold()
    assert BATCH_GC_THRESHOLDS[0] > before[0]
    with pytest.raises(RuntimeError), batch_process():
        assert gc.get_threshold() == BATCH_GC_THRESHOLDS
        raise RuntimeError("a run that fails still gives the thresholds back")
    assert gc.get_threshold() == before


def test_a_lane_count_the_user_chose_is_kept(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(LANES_VARIABLE, "3")
    with batch_process(2):
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



@pytest.mark.parametrize(("trigger", "launched"), [("idle:1800", 1), ("idle:7200", 0)])
async def test_a_recorded_gap_between_sessions_counts_as_idle_time(tmp_path: Path, trigger: str, launched: int) -> None:
    task = parse_task(two_sessions_an_hour_apart(reflection_trigger=trigger))
    result = await run_task(task, RunOptions(out_dir=tmp_path))
    assert result.status == "passed", result.error
    assert result.reflections_launched == launched
    kinds = [e.kind for e in await anyio.to_thread.run_sync(lambda: read_events(tmp_path, task=task.id))]
    if launched:
        # between the sessions: after the first one's turn, before the second one's
        assert kinds.index("reflection.launch") < [i for i, k in enumerate(kinds) if k == "turn.start"][1]


@pytest.mark.anyio
async def test_a_tasks_agent_and_reflection_commits_name_the_run_and_the_task(tmp_path: Path) -> None:
    task = parse_task(
        {
            "id": "traced",
            "turns": ["I prefer green tea", "设定：回答末尾总是加上 🦉", "再说一次"],
            "settings": {"reflection_trigger": "step-count:1"},
            "checks": [{"where": "answer", "contains": "🦉"}],
        }
    )
    out = tmp_path / "run-7"
    result = await run_task(task, RunOptions(out_dir=out))
    assert result.status == "passed", result.error
    found = await anyio.to_thread.run_sync(changes, task_paths(out, "traced").memory)
    made = [c.provenance for c in found if c.provenance.source in ("agent", "reflection")]
    assert {p.source for p in made} == {"agent", "reflection"}
    assert all((p.run, p.task, p.agent) == ("run-7", "traced", "traced") for p in made)

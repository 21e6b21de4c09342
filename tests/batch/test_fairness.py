"""Fair scheduling in a batch (P4): with many tasks in flight and little room for blocking work,
the tasks that started first finish first instead of all advancing in lockstep."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from orchestrator.batch.executors import LocalExecutor
from orchestrator.batch.results import RESULTS_FILE
from orchestrator.batch.run import run_suite
from orchestrator.batch.runner import RunOptions
from orchestrator.batch.suite import load_suite
from tests.batch.helpers import write_suite

pytestmark = pytest.mark.anyio


@pytest.mark.slow
async def test_early_tasks_finish_first_when_everything_is_in_flight(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("REVERIE_GIT_SLOTS", "1")
    count = 10
    suite = write_suite(
        tmp_path / "s.jsonl",
        [
            {"id": f"t{i:02d}", "turns": [f"hello {i}", f"again {i}"], "settings": {"reflection_trigger": "off"},
             "checks": [{"contains": f"I heard: again {i}"}]}
            for i in range(count)
        ],
    )
    out = tmp_path / "out"
    report = await run_suite(load_suite(suite), RunOptions(out_dir=out, latency=0.02), LocalExecutor(count))
    assert report.summary["passed"] == count
    finished = [int(json.loads(line)["id"][1:]) for line in (out / RESULTS_FILE).read_text().splitlines()]
    assert sorted(finished) == list(range(count))
    assert set(finished[:3]) <= set(range(5)), finished
    assert set(finished[-3:]) <= set(range(count - 5, count)), finished

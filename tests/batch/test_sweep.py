"""The sweep's hold on its executor: one start (one Ray) serves every setting; its limit stops per setting."""

from __future__ import annotations

import io
import json
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import anyio
from rich.console import Console

from orchestrator.batch.executors import LocalExecutor
from orchestrator.batch.runner import RunOptions
from orchestrator.batch.suite import Task, load_suite
from orchestrator.batch.sweep import expand_triggers, run_sweep
from orchestrator.cli.batch_output import sweep_table
from tests.batch.helpers import limited_sweep, write_suite


class _Held(LocalExecutor):
    """The local executor, with a ``hold`` that logs when it is entered and left, and each run
    logged with whether it ran inside the hold."""

    def __init__(self, log: list[str]) -> None:
        super().__init__(1)
        self.log = log
        self.held = False

    @asynccontextmanager
    async def _holding(self) -> AsyncIterator[None]:
        self.log.append("hold")
        self.held = True
        try:
            yield
        finally:
            self.held = False
            self.log.append("release")

    def hold(self) -> Any:
        return self._holding()

    async def run(self, tasks: Sequence[Task], options: RunOptions, **kwargs: Any) -> None:
        self.log.append(f"run {options.out_dir.name} {'held' if self.held else 'not held'}")
        await super().run(tasks, options, **kwargs)


def test_an_executor_that_can_be_held_is_held_once_around_every_setting(tmp_path: Path) -> None:
    suite = write_suite(tmp_path / "s.jsonl", [{"id": "a", "turns": ["hi"], "checks": [{"contains": "hi"}]}])
    log: list[str] = []
    executor = _Held(log)
    made: list[int] = []

    def make() -> _Held:
        made.append(1)
        return executor

    report = anyio.run(
        lambda: run_sweep(load_suite(suite), expand_triggers(["off", "step-count:2"]), RunOptions(out_dir=tmp_path / "sw"),
                          make, epochs=2),
        backend="trio",
    )
    assert log == ["hold", "run off held", "run step-count-2 held", "release"]
    assert len(made) == 2, "each setting still gets the executor its maker gives"
    assert [sorted(r.id for r in run.results) for run in report.runs] == [["a.epoch-1", "a.epoch-2"]] * 2


def test_the_sweep_counts_limit_stops_per_setting_in_its_decision_and_table(tmp_path: Path) -> None:
    report = limited_sweep(tmp_path / "sw")
    rows = {r["setting"]: r for r in report.summary["settings"]}
    assert rows["tight"]["outcomes"]["limit"] == 2 and rows["roomy"]["outcomes"]["limit"] == 0
    assert rows["tight"]["limit_stops"] == {"reflections": 2, "tasks": 0, "task_limits": {}}
    assert rows["roomy"]["limit_stops"] == {"reflections": 0, "tasks": 0, "task_limits": {}}
    assert rows["roomy"]["reflections"] == 2, "the same reflections finish with room to"
    stored = {r["setting"]: r["limit_stops"] for r in json.loads((tmp_path / "sw" / "summary.json").read_text())["settings"]}
    assert stored == {k: v["limit_stops"] for k, v in rows.items()}
    markdown = (tmp_path / "sw" / "summary.md").read_text(encoding="utf-8")
    assert "| tight" in markdown and "| 2 refl |" in markdown and "| 0 |" in markdown
    out = io.StringIO()
    Console(file=out, width=80, force_terminal=False).print(sweep_table(report.summary, "sweep", width=80))
    table = out.getvalue()
    assert "limit stops" in table and "2 refl" in table and "narrow terminal" in table, table
    tight = next(line for line in table.splitlines() if "tight" in line)
    assert tight.index("2 refl") > tight.index("0.") > tight.index("tight"), "next to its quality"

"""The sweep's hold on its executor: one start (one Ray) serves every setting."""

from __future__ import annotations

from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import anyio

from orchestrator.batch.executors import LocalExecutor
from orchestrator.batch.runner import RunOptions
from orchestrator.batch.suite import Task, load_suite
from orchestrator.batch.sweep import expand_triggers, run_sweep
from tests.batch.helpers import write_suite


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

"""run.json records the executor settings that decide how tasks run: the executor, its
concurrency and ``--processes`` as it was given (auto or a number), for real runs on the scripted
model with each kind of local executor."""

from __future__ import annotations

import json
from pathlib import Path

import anyio
import pytest

from orchestrator.batch.executors import LocalExecutor, ProcessExecutor
from orchestrator.batch.protocol import Executor
from orchestrator.batch.run import RUN_FILE, run_suite
from orchestrator.batch.runner import RunOptions
from orchestrator.batch.suite import load_suite
from tests.batch.helpers import TINY, write_suite

pytestmark = pytest.mark.anyio


@pytest.mark.parametrize(
    ("executor", "recorded"),
    [(LocalExecutor(2), 1), (ProcessExecutor(2, processes=None), "auto"), (ProcessExecutor(2, processes=2), 2)],
    ids=["in-process", "auto", "two"],
)
async def test_run_json_records_processes_as_given(tmp_path: Path, executor: Executor, recorded: object) -> None:
    tasks = await anyio.to_thread.run_sync(load_suite, write_suite(tmp_path / "s.jsonl", [TINY[2], TINY[4]]))
    out = tmp_path / "out"
    report = await run_suite(tasks, RunOptions(out_dir=out), executor)
    assert report.summary["statuses"] == {"chat": "passed", "wrong": "failed"}
    meta = json.loads(await anyio.Path(out / RUN_FILE).read_text())
    assert (meta["executor"], meta["concurrency"], meta["processes"]) == ("local", 2, recorded)

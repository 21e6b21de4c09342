"""Each task's memory repository is a fresh copy of the run's template for its seed files: tasks
with the same seeds share one template, yet their repositories are independent; other seeds get
their own template."""

from __future__ import annotations

import subprocess
from pathlib import Path

import anyio
import pytest

from orchestrator.batch.executors import LocalExecutor
from orchestrator.batch.run import run_suite
from orchestrator.batch.runner import RunOptions, task_paths
from orchestrator.batch.suite import load_suite
from tests.batch.helpers import TINY, write_suite

pytestmark = pytest.mark.anyio


def _git(repo: Path, *args: str) -> str:
    return subprocess.run(["git", "-C", str(repo), *args], capture_output=True, text=True, check=True).stdout


def _inspect(out: Path, task_id: str) -> tuple[str, str, str, str]:
    memory = task_paths(out, task_id).memory
    top = _git(memory, "rev-parse", "--show-toplevel").strip()
    first = _git(memory, "rev-list", "--max-parents=0", "HEAD").strip()
    return top, first, _git(memory, "log", "--format=%s"), _git(memory, "status", "--porcelain")


async def test_tasks_copy_one_template_per_seed_and_stay_independent(tmp_path: Path) -> None:
    suite = write_suite(tmp_path / "s.jsonl", [TINY[0], TINY[1], TINY[3]])
    out = tmp_path / "out"
    report = await run_suite(load_suite(suite), RunOptions(out_dir=out), LocalExecutor(3))
    assert report.summary["passed"] == 3
    rule, fact, seeded = [await anyio.to_thread.run_sync(_inspect, out, t) for t in ("rule", "fact", "seeded")]
    assert rule[0] == str(task_paths(out, "rule").memory.resolve())
    assert fact[0] == str(task_paths(out, "fact").memory.resolve())
    assert rule[1] == fact[1] != seeded[1]  # same seeds, same first commit; other seeds, another
    assert "persona" in rule[2] and "persona" not in fact[2]
    assert "human" in fact[2] and "human" not in rule[2]
    assert rule[3] == fact[3] == seeded[3] == ""
    assert len([p for p in (out / "templates").iterdir() if not p.name.startswith(".")]) == 2

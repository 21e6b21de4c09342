"""Batch runs in-process: results, summary, event log, and resume after an interrupted run."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import anyio
import pytest

from orchestrator.batch.eventlog import follow_events, read_events
from orchestrator.batch.executors import LocalExecutor
from orchestrator.batch.results import RESULTS_FILE, SUMMARY_FILE, TaskResult, read_results
from orchestrator.batch.run import _Journal, run_suite
from orchestrator.batch.runner import RunOptions
from orchestrator.batch.suite import load_suite
from tests.batch.helpers import EXPECTED, TINY, write_suite

pytestmark = pytest.mark.anyio


async def test_small_suite_run(tmp_path: Path) -> None:
    tasks = await anyio.to_thread.run_sync(load_suite, write_suite(tmp_path / "s.jsonl"))
    out = tmp_path / "out"
    seen: list[tuple[str, str]] = []

    async def progress(task_id: str, kind: str, payload: object) -> None:
        seen.append((task_id, kind))

    report = await run_suite(tasks, RunOptions(out_dir=out, price_in=1.0, price_out=2.0), LocalExecutor(3), progress=progress)
    assert {r.id: r.status for r in report.results} == EXPECTED
    rule = next(r for r in report.results if r.id == "rule")
    assert (rule.checks_passed, rule.checks_total, rule.turns) == (2, 2, 2)
    assert rule.steps >= 3 and rule.tokens_in > 0 and rule.tokens_out > 0
    assert rule.cost == pytest.approx(rule.tokens_in / 1e6 + 2 * rule.tokens_out / 1e6, abs=1e-6)
    assert rule.memory_head and len(rule.memory_head) == 40
    assert rule.final_answer.endswith("~fin")
    wrong = next(r for r in report.results if r.id == "wrong")
    assert wrong.checks[0].passed is False and wrong.error is None

    lines = (out / RESULTS_FILE).read_text().splitlines()
    assert sorted(json.loads(line)["id"] for line in lines) == sorted(EXPECTED)
    summary = json.loads((out / SUMMARY_FILE).read_text())
    assert (summary["tasks"], summary["passed"], summary["failed"], summary["error"]) == (5, 4, 1, 0)
    assert summary["turns"] == 7

    events = read_events(out, task="rule")
    kinds = [e.kind for e in events]
    assert kinds[0] == "task.start" and kinds[-1] == "task.end"
    for kind in ("turn.start", "turn.end", "model.call", "tool.start", "tool.end", "memory.commit"):
        assert kind in kinds, kind
    call = next(e for e in events if e.kind == "model.call")
    assert call.payload["prompt_tokens"] > 0 and "latency_ms" in call.payload
    assert [e.seq for e in events] == sorted(e.seq for e in events)
    assert ("rule", "turn.end") in seen and ("rule", "model.call") in seen
    followed = list(follow_events(out, task="rule", stop=lambda: True))
    assert [e.kind for e in followed] == kinds
    # memory edits really landed in each task's own repository
    persona = out / "home" / "agents" / "rule" / "memory" / "persona.md"
    assert "- always end answers with ~fin" in persona.read_text()


async def test_resume_runs_only_missing_tasks(tmp_path: Path) -> None:
    tasks = await anyio.to_thread.run_sync(load_suite, write_suite(tmp_path / "s.jsonl"))
    clean = await run_suite(tasks, RunOptions(out_dir=tmp_path / "clean"), LocalExecutor(2))

    out = tmp_path / "resumed"
    with anyio.CancelScope() as scope:
        recorded = 0

        async def stop_after_two(_: object) -> None:
            nonlocal recorded
            recorded += 1
            if recorded == 2:
                scope.cancel()

        await run_suite(tasks, RunOptions(out_dir=out), LocalExecutor(2), on_result=stop_after_two)
    assert scope.cancelled_caught
    first = read_results(out / RESULTS_FILE)
    # a task finishing while the cancel lands is still recorded (on_result is shielded), so 2 or more
    assert 2 <= len(first) < len(tasks)
    assert not (out / SUMMARY_FILE).exists()
    # an interrupted task left a partial repository behind; resume must start it from scratch
    leftovers = [t.id for t in tasks if t.id not in first and (out / "home" / "agents" / t.id).exists()]

    with pytest.raises(ValueError, match="--resume"):
        await run_suite(tasks, RunOptions(out_dir=out), LocalExecutor(2))
    report = await run_suite(tasks, RunOptions(out_dir=out), LocalExecutor(2), resume=True)
    assert set(report.ran) == {t.id for t in tasks} - set(first)
    assert set(report.skipped) == set(first)
    assert report.summary["resumed"] == len(first)
    lines = (out / RESULTS_FILE).read_text().splitlines()
    assert len(lines) == len(tasks)

    def outcome(results: object) -> dict[str, object]:
        return {r.id: (r.status, r.checks, r.turns, r.steps) for r in results}  # type: ignore[attr-defined]

    assert outcome(report.results) == outcome(clean.results)
    for key in ("tasks", "passed", "failed", "error", "checks_passed", "checks_total", "turns", "statuses"):
        assert report.summary[key] == clean.summary[key], key
    for task_id in leftovers:
        log = [e.kind for e in read_events(out, task=task_id)]
        assert log.count("task.start") == 1, f"{task_id}: the old attempt's log was not discarded"


async def test_invalid_template_is_an_error_result(tmp_path: Path) -> None:
    bad = [{"id": "bad-template", "turns": ["hi"], "template": {"files": {"persona.md": "no frontmatter\n"}},
            "checks": [{"contains": "hi"}]}]
    tasks = await anyio.to_thread.run_sync(load_suite, write_suite(tmp_path / "s.jsonl", bad))
    report = await run_suite(tasks, RunOptions(out_dir=tmp_path / "out"), LocalExecutor(1))
    (result,) = report.results
    assert result.status == "error" and result.turns == 0
    assert result.error is not None and "persona.md" in result.error


def test_a_run_without_otel_variables_imports_no_telemetry_and_writes_no_span_file(tmp_path: Path) -> None:
    pytest.importorskip("opentelemetry.sdk.trace", reason="without the SDK there is nothing that could be imported")
    suite = write_suite(tmp_path / "s.jsonl", TINY[:2])  # a model call and a tool call: what spans were made of
    out = tmp_path / "out"
    env = {k: v for k, v in os.environ.items() if not k.startswith("OTEL_")}
    env["REVERIE_HOME"] = str(tmp_path / "home")
    command = [sys.executable, "-X", "importtime", "-m", "orchestrator", "run", str(suite), "--out", str(out)]
    proc = subprocess.run([*command, "-j", "1", "--processes", "1"], env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert (out / SUMMARY_FILE).exists()
    assert not (out / "otel-spans.jsonl").exists()
    imported = [line for line in proc.stderr.splitlines() if line.startswith("import time:") and "opentelemetry" in line]
    assert not imported, imported[:3]


async def test_results_journal_writes_every_line_once_and_returns_only_after_it(tmp_path: Path) -> None:
    path = tmp_path / "results.jsonl"
    journal = _Journal(path)
    seen_on_return: dict[str, bool] = {}

    async def finish(i: int) -> None:
        result = TaskResult(id=f"t{i:03d}", status="passed", checks_passed=1, checks_total=1)
        await journal.append(result)
        recorded = await anyio.to_thread.run_sync(read_results, path)
        seen_on_return[result.id] = result.id in recorded

    async with anyio.create_task_group() as tg:
        for i in range(60):
            tg.start_soon(finish, i)
    lines = (await anyio.Path(path).read_text()).splitlines()
    assert len(lines) == 60 and len({line for line in lines}) == 60, "each result exactly once"
    assert all(seen_on_return.values()) and len(seen_on_return) == 60, "a caller returns once its line is written"


async def test_a_results_journal_that_cannot_write_says_so(tmp_path: Path) -> None:
    journal = _Journal(tmp_path / "missing" / "results.jsonl")
    with pytest.raises(OSError):
        await journal.append(TaskResult(id="t", status="passed", checks_passed=0, checks_total=0))


async def test_a_run_under_review_reports_every_held_branch(tmp_path: Path) -> None:
    """V1: with ``reflection_merge: review`` nothing a reflection wrote reaches a task's memory; the
    result and the summary name the branches held for a person."""
    settings = {"reflection_trigger": "step-count:1", "reflection_merge": "review"}
    tasks_json = [
        {
            "id": f"t{n}", "turns": [f"I like the number {n}", "I prefer tea"], "settings": settings,
            "checks": [{"where": "memory", "file": "human.md", "contains": f"number {n}", "negate": True}],
        }
        for n in range(2)
    ]
    tasks = await anyio.to_thread.run_sync(load_suite, write_suite(tmp_path / "s.jsonl", tasks_json))
    out = tmp_path / "out"
    report = await run_suite(tasks, RunOptions(out_dir=out), LocalExecutor(2))
    for result in report.results:
        assert (result.error, result.status) == (None, "passed"), "nothing a reflection wrote reached memory"
        assert result.reflections_launched >= 1
        assert result.reflection_outcomes["review"] == result.reflections_launched == len(result.held_branches)
        assert result.reflections_merged == 0
        assert all(b.startswith("reverie/reflection/") for b in result.held_branches)
    summary = json.loads((out / SUMMARY_FILE).read_text())
    assert summary["reflections_held"] == sum(len(r.held_branches) for r in report.results) >= 2
    assert summary["held_branches"] == {r.id: list(r.held_branches) for r in report.results}
    assert summary["reflection_outcomes"]["review"] == summary["reflections_held"]
    again = read_results(out / RESULTS_FILE)
    assert {k: v.held_branches for k, v in again.items()} == {r.id: r.held_branches for r in report.results}

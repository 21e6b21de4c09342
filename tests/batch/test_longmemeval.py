"""The shipped LongMemEval-S benchmark: the vendored data and its importer, a graded run of replayed
history on the embedded model, the score's honesty (answer keys it never saw), a sweep's decision."""

from __future__ import annotations

import json
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import anyio
import pytest

from orchestrator.batch.executors import LocalExecutor
from orchestrator.batch.results import OUTCOMES
from orchestrator.batch.run import run_suite
from orchestrator.batch.runner import RunOptions
from orchestrator.batch.suite import Grade, Task, load_suite, select_tasks
from orchestrator.batch.sweep import expand_triggers, run_sweep

pytestmark = pytest.mark.anyio

ROOT = Path(__file__).resolve().parents[2]
BENCH = ROOT / "examples" / "longmemeval-s"
SUITE = BENCH / "suite.jsonl"
# the three tasks the embedded model answers (at the time of writing) and one it does not
SAMPLE = ["lme-e47becba", "lme-830ce83f", "lme-852ce960", "lme-118b2229"]


def test_vendored_data_licences_and_converted_suite_are_in_step(tmp_path: Path) -> None:
    for name in ("LICENSE-memory-arena", "LICENSE-LongMemEval", "README.md"):
        assert (BENCH / name).is_file()
    assert "MIT License" in (BENCH / "LICENSE-LongMemEval").read_text() and "Di Wu" in (BENCH / "LICENSE-LongMemEval").read_text()
    questions = (BENCH / "data" / "questions.jsonl").read_text().splitlines()
    sessions = (BENCH / "data" / "sessions.jsonl").read_text().splitlines()
    assert len(questions) == 16 and len(sessions) == 82
    again = tmp_path / "again.jsonl"
    subprocess.run(
        [sys.executable, "-m", "orchestrator", "suite", "import", "memory-arena", str(BENCH / "data"), "-o", str(again)],
        check=True, capture_output=True,
    )
    assert again.read_bytes() == SUITE.read_bytes()  # the shipped suite is what the importer writes, byte for byte
    tasks = load_suite(SUITE)
    abilities = [t.grade.ability for t in tasks if t.grade is not None]
    assert {a: abilities.count(a) for a in set(abilities)} == {
        "extraction": 4, "multi-session": 4, "temporal": 4, "knowledge-update": 4
    }
    assert all(t.history and t.pinned_trigger is None for t in tasks)
    first = tasks[0]
    assert first.history[0].date.endswith("Z") and first.turns[0].startswith("Current date: 2023/05/30")


def _perturbed(tasks: list[Task]) -> list[Task]:
    """Every answer key replaced by another task's key (a wrong answer for this question)."""
    keys = [t.grade for t in tasks]
    assert all(k is not None for k in keys)
    shifted = keys[1:] + keys[:1]
    return [replace(t, grade=Grade(answer=k.answer, ability=t.grade.ability)) for t, k in zip(tasks, shifted, strict=True)]  # type: ignore[union-attr]


async def test_graded_replay_run_and_perturbed_keys_lower_the_score(tmp_path: Path) -> None:
    tasks = select_tasks(await anyio.to_thread.run_sync(load_suite, SUITE), SAMPLE)
    report = await run_suite(tasks, RunOptions(out_dir=tmp_path / "run"), LocalExecutor(4))
    by_id = {r.id: r for r in report.results}
    for result in report.results:
        task = next(t for t in tasks if t.id == result.id)
        assert result.error is None and result.grade is not None and result.grade["method"] == "deterministic"
        assert result.replayed_turns == sum(len(s.exchanges) for s in task.history)
        assert result.steps >= result.replayed_turns + 1 and result.turns == 1
        assert result.replayed_tokens > 0 and result.memory_bytes
        assert sum(result.reflection_outcomes.values()) == result.reflections_launched
        assert set(result.reflection_outcomes) == set(OUTCOMES)
    assert by_id["lme-e47becba"].grade["passed"] and "Business Administration" in by_id["lme-e47becba"].final_answer  # type: ignore[index]
    score = report.summary["quality"]
    assert score == pytest.approx(sum(r.quality or 0 for r in report.results) / len(SAMPLE)) and score > 0
    perturbed = await run_suite(_perturbed(tasks), RunOptions(out_dir=tmp_path / "perturbed"), LocalExecutor(4))
    assert perturbed.summary["quality"] < score
    # the model's answers did not change: it never saw a key
    assert {r.id: r.final_answer for r in perturbed.results} == {r.id: r.final_answer for r in report.results}


async def test_sweep_over_the_benchmark_decides_and_counts_tasks_as_they_finish(tmp_path: Path) -> None:
    tasks = select_tasks(await anyio.to_thread.run_sync(load_suite, SUITE), SAMPLE[:2])
    settings = expand_triggers(["off", "step-count:2", "compaction-event"])
    finished: list[tuple[str, str]] = []
    ended: list[str] = []

    def on_result_for(setting: object) -> object:
        async def on_result(result: object) -> None:
            finished.append((setting.label, result.id))  # type: ignore[attr-defined]

        return on_result

    async def on_setting_done(setting: object, report: object) -> None:
        ended.append(setting.label)  # type: ignore[attr-defined]
        assert len([f for f in finished if f[0] == setting.label]) == 4  # type: ignore[attr-defined]

    options = RunOptions(out_dir=tmp_path / "sweep", price_in=1.0, price_out=4.0)
    report = await run_sweep(
        tasks, settings, options, lambda: LocalExecutor(4), epochs=2,
        on_result_for=on_result_for, on_setting_done=on_setting_done,  # type: ignore[arg-type]
    )
    assert ended == ["off", "step-count-2", "compaction-event"]
    assert sorted(finished) == sorted(
        (s, f"{t}.epoch-{k}") for s in ended for t in SAMPLE[:2] for k in (1, 2)
    )
    summary = json.loads((tmp_path / "sweep" / "summary.json").read_text())
    assert summary == json.loads(json.dumps(report.summary))
    assert summary["epochs"] == 2 and summary["cost_unit"] == "cost"
    for row in summary["settings"]:
        assert row["samples"] == 4 and row["tasks"] == 2
        assert 0 <= row["quality"]["low"] <= row["quality"]["mean"] <= row["quality"]["high"] <= 1
        assert sum(row["outcomes"].values()) == row["reflections"]
        assert row["main_cost"] + row["subagent_cost"] == pytest.approx(row["cost"])
        assert set(row["abilities"]) == {"extraction", "knowledge-update"}
    rows = {r["setting"]: r for r in summary["settings"]}
    assert rows["off"]["reflections"] == 0 and rows["step-count-2"]["reflections"] > 0
    assert summary["recommendation"]["setting"] in summary["front"]
    assert str(rows[summary["recommendation"]["setting"]]["quality"]["mean"])[:4] in summary["recommendation"]["reason"]
    markdown = (tmp_path / "sweep" / "summary.md").read_text()
    assert "Recommended:" in markdown and "no_changes" in markdown


async def test_a_sweep_of_the_shipped_subset_shows_the_published_references_and_a_paired_decision(tmp_path: Path) -> None:
    from orchestrator import report, sweep

    result = await sweep(SUITE, ["off", "step-count:2"], tmp_path / "sweep", tasks=SAMPLE[:2])
    refs = {r["system"]: r for r in result.summary["references"]}
    assert len(refs) == 16 and refs["mem0"]["model"] == "claude-sonnet-4-6" and refs["mem0"]["quality"] == 0.4071
    assert refs["mem0"]["abilities"]["extraction"] == 0.6167
    paired = {c["setting"]: c for c in result.summary["paired"]}
    assert set(paired) == {"off", "step-count-2"} and all(c["test"] == "mcnemar-exact" and c["n"] == 2 for c in paired.values())
    assert result.summary["detectable"]
    page = (await report(tmp_path / "sweep")).read_text(encoding="utf-8")
    assert 'id="references"' in page and '"system":"mem0"' in page and "claude-sonnet-4-6" in page
    assert 'id="paired"' in page and '"test":"mcnemar-exact"' in page
    markdown = (tmp_path / "sweep" / "summary.md").read_text()
    assert "| mem0 | claude-sonnet-4-6 | 0.407 |" in markdown and "exact McNemar" in markdown


async def test_identical_runs_report_identical_token_totals(tmp_path: Path) -> None:
    tasks = select_tasks(await anyio.to_thread.run_sync(load_suite, SUITE), SAMPLE[:2])
    options = {"reflection_trigger": "step-count", "reflection_step_count": 2}
    totals = []
    for name in ("one", "two"):
        report = await run_suite(tasks, RunOptions(out_dir=tmp_path / name, overrides=options), LocalExecutor(2))
        totals.append({r.id: (r.tokens_in, r.tokens_out, r.model_calls, r.reflections_launched) for r in report.results})
    assert totals[0] == totals[1] and all(calls for _, _, calls, _ in totals[0].values())

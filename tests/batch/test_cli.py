"""``reverie run | sweep | events`` through the command line (typer's runner, in-process)."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

import pytest
import typer
from typer.testing import CliRunner

from orchestrator.cli.batch import register
from tests.batch.helpers import TINY, two_sessions_an_hour_apart, write_suite


@pytest.fixture
def cli() -> typer.Typer:
    app = typer.Typer()
    register(app)
    return app


def test_bad_line_names_line_and_field_and_nothing_starts(cli: typer.Typer, tmp_path: Path) -> None:
    bad = [TINY[0], {**TINY[1], "settings": {"max_steps": -1}}]
    suite = write_suite(tmp_path / "s.jsonl", bad)
    result = CliRunner().invoke(cli, ["run", str(suite), "--out", str(tmp_path / "out")])
    assert result.exit_code == 1
    assert f"{suite}:2: settings.max_steps: -1: must be positive" in result.output
    assert not (tmp_path / "out").exists()


def test_run_table_exit_code_and_events(cli: typer.Typer, tmp_path: Path) -> None:
    suite = write_suite(tmp_path / "s.jsonl", TINY[:3])
    out = tmp_path / "out"
    result = CliRunner().invoke(cli, ["run", str(suite), "-j", "2", "--out", str(out), "-q"])
    assert result.exit_code == 0, result.output
    assert "3 passed" in result.output and "results:" in result.output
    again = CliRunner().invoke(cli, ["run", str(suite), "--out", str(out), "-q"])
    assert again.exit_code == 1 and "--resume" in again.output
    resumed = CliRunner().invoke(cli, ["run", str(suite), "--out", str(out), "-q", "--resume"])
    assert resumed.exit_code == 0 and "3 task(s) already done, 0 run now" in resumed.output

    listed = CliRunner().invoke(cli, ["events", str(out), "--task", "rule", "--kind", "model.call"])
    assert listed.exit_code == 0
    lines = listed.output.strip().splitlines()
    assert lines and all("  rule  model.call  chat scripted in=" in line for line in lines)  # the purpose first
    raw = CliRunner().invoke(cli, ["events", str(out), "--json", "--kind", "turn.end"])
    assert sorted({json.loads(line)["task"] for line in raw.output.splitlines()}) == ["chat", "fact", "rule"]

    failing = write_suite(tmp_path / "f.jsonl", TINY[4:])
    failed = CliRunner().invoke(cli, ["run", str(failing), "--out", str(tmp_path / "out2"), "-q"])
    assert failed.exit_code == 1 and "never said" in failed.output


def test_events_on_a_directory_without_a_log(cli: typer.Typer, tmp_path: Path) -> None:
    result = CliRunner().invoke(cli, ["events", str(tmp_path)])
    assert result.exit_code == 1 and "no event log here" in result.output


def test_sweep_table_and_charts(cli: typer.Typer, tmp_path: Path) -> None:
    suite = write_suite(tmp_path / "s.jsonl", [TINY[0], TINY[2]])
    out = tmp_path / "sweep"
    result = CliRunner().invoke(
        cli, ["sweep", str(suite), "--trigger", "off", "--trigger", "step-count:1,2", "--out", str(out), "-q", "-j", "2"]
    )
    assert result.exit_code == 0, result.output
    for label in ("off", "step-count-1", "step-count-2"):
        assert label in result.output
        assert (out / label / "results.jsonl").exists()
    rows = json.loads((out / "comparison.json").read_text())
    assert [r["setting"] for r in rows] == ["off", "step-count-1", "step-count-2"]
    # "chat" pins its own trigger (off): left out of the comparison, and said so
    assert all(r["checks_passed"] == 2 and r["tasks"] == 1 for r in rows)
    assert "pinned, left out" in result.output and "chat (off)" in result.output
    assert json.loads((out / "summary.json").read_text())["pinned"] == {"chat": "off"}
    assert rows[0]["reflections"] == 0 and rows[1]["reflections"] >= 1
    for metric in ("checks_passed", "reflections", "merges", "conflicts", "tokens", "wall_time"):
        svg = (out / "charts" / f"{metric}.svg").read_text(encoding="utf-8")
        assert "<svg" in svg and 'class="bar"' in svg and "<style>" in svg
    bad = CliRunner().invoke(cli, ["sweep", str(suite), "--trigger", "step-count:0", "--out", str(tmp_path / "x")])
    assert bad.exit_code == 1 and "step-count:0" in bad.output


def test_scripted_latency_slows_every_model_call_and_concurrency_reaches_4096(cli: typer.Typer, tmp_path: Path) -> None:
    suite = write_suite(tmp_path / "s.jsonl", [TINY[2]])
    out = tmp_path / "out"
    result = CliRunner().invoke(
        cli, ["run", str(suite), "-j", "4096", "--scripted-latency", "0.05", "--out", str(out), "-q"]
    )
    assert result.exit_code == 0, result.output
    run = json.loads((out / "run.json").read_text())
    assert run["concurrency"] == 4096 and run["options"]["latency"] == 0.05
    raw = CliRunner().invoke(cli, ["events", str(out), "--json", "--kind", "model.call"])
    calls = [json.loads(line)["payload"] for line in raw.output.splitlines()]
    assert calls and all(c["latency_ms"] >= 50 for c in calls)
    too_many = CliRunner().invoke(cli, ["run", str(suite), "-j", "4097", "--out", str(tmp_path / "x"), "-q"])
    assert too_many.exit_code != 0 and not (tmp_path / "x").exists()


def test_sweep_over_the_example_suite_flags_its_pinned_tasks(cli: typer.Typer, tmp_path: Path) -> None:
    example = Path(__file__).resolve().parents[2] / "examples" / "suite.jsonl"
    picked = ["--task", "edit-suffix-rule", "--task", "reflect-step-count", "--task", "reflect-compaction-event"]
    out = tmp_path / "sweep"
    result = CliRunner().invoke(cli, ["sweep", str(example), "--trigger", "off", *picked, "--out", str(out), "-q", "-j", "2"])
    assert result.exit_code == 0, result.output
    assert "reflect-step-count (step-count:2)" in result.output and "reflect-compaction-event (compaction-event)" in result.output
    summary = json.loads((out / "summary.json").read_text())
    assert summary["pinned"] == {"reflect-step-count": "step-count:2", "reflect-compaction-event": "compaction-event"}
    assert summary["override_pinned"] is False and summary["settings"][0]["tasks"] == 1
    assert [json.loads(line)["id"] for line in (out / "off" / "results.jsonl").read_text().splitlines()] == ["edit-suffix-rule"]
    override = tmp_path / "override"
    both = CliRunner().invoke(
        cli, ["sweep", str(example), "--trigger", "off", *picked, "--override-pinned", "--out", str(override), "-q", "-j", "3"]
    )
    assert both.exit_code == 0, both.output
    overridden = json.loads((override / "summary.json").read_text())
    assert overridden["override_pinned"] is True and overridden["settings"][0]["tasks"] == 3
    ran = {json.loads(line)["id"]: json.loads(line)["settings"]["reflection_trigger"]
           for line in (override / "off" / "results.jsonl").read_text().splitlines()}
    assert ran == {"edit-suffix-rule": "off", "reflect-step-count": "off", "reflect-compaction-event": "off"}
    only_pinned = CliRunner().invoke(cli, ["sweep", str(example), "--trigger", "off", "--task", "reflect-off",
                                           "--out", str(tmp_path / "none")])
    assert only_pinned.exit_code == 1 and "every task pins its own reflection trigger" in only_pinned.output


def test_sweep_compares_the_idle_trigger_between_recorded_sessions(cli: typer.Typer, tmp_path: Path) -> None:
    suite = write_suite(tmp_path / "s.jsonl", [two_sessions_an_hour_apart()])
    out = tmp_path / "sweep"
    result = CliRunner().invoke(cli, ["sweep", str(suite), "-t", "idle:30", "-t", "off", "--out", str(out), "-q"])
    assert result.exit_code == 0, result.output
    rows = json.loads((out / "comparison.json").read_text())
    assert [(r["setting"], r["reflections"]) for r in rows] == [("idle-30", 1), ("off", 0)]


def test_a_run_stops_launching_at_its_token_limit_and_a_resume_with_more_finishes(
    cli: typer.Typer, tmp_path: Path
) -> None:
    chats = [{"id": f"c{i}", "turns": [f"just chatting {i}"], "settings": {"reflection_trigger": "off"},
              "checks": [{"contains": f"just chatting {i}"}]} for i in range(6)]  # fmt: skip
    suite = write_suite(tmp_path / "chats.jsonl", chats)
    out = tmp_path / "out"
    probe = CliRunner().invoke(cli, ["run", str(suite), "--out", str(tmp_path / "probe"), "-q", "-P", "1", "--task", "c0"])
    assert probe.exit_code == 0, probe.output
    each = json.loads((tmp_path / "probe" / "summary.json").read_text())["tokens_in"] * 1.0
    budget = int(3.5 * each)  # four tasks reach it: each costs about as much as the first
    first = CliRunner().invoke(cli, ["run", str(suite), "--out", str(out), "-q", "-P", "1", "--max-tokens", str(budget)])
    assert first.exit_code == 4, first.output
    assert "stopped at the run's tokens limit (run.tokens)" in first.output and "2 task(s) not run" in first.output
    assert "Traceback" not in first.output
    summary = json.loads((out / "summary.json").read_text())
    assert summary["run_limit"]["limit"] == "run.tokens" and summary["run_limit"]["not_run"] == ["c4", "c5"]
    lines = (out / "results.jsonl").read_text().splitlines()
    assert [json.loads(line)["id"] for line in lines] == ["c0", "c1", "c2", "c3"], "no line: resume runs them"
    assert not (out / "home" / "stores" / "c4.sqlite3").exists(), "a task after the limit never started"
    spent = {t: _store_tokens(out, t) for t in ("c0", "c1", "c2", "c3")}
    recorded = {json.loads(line)["id"]: json.loads(line) for line in lines}
    assert spent == {t: r["tokens_in"] + r["tokens_out"] for t, r in recorded.items()}, "results agree with the stores"
    assert sum(spent.values()) >= budget > sum(spent.values()) - spent["c3"], "launching stopped once the budget was spent"
    again = CliRunner().invoke(cli, ["run", str(suite), "--out", str(out), "-q", "--resume", "--max-tokens", str(2 * budget)])
    assert again.exit_code == 0, again.output
    summary = json.loads((out / "summary.json").read_text())
    assert summary["run_limit"] is None and summary["passed"] == 6
    assert sum(_store_tokens(out, f"c{i}") for i in range(6)) <= 2 * budget, "the whole run within the raised budget"


def test_a_sweep_stops_at_its_token_limit_with_every_setting_paired_and_a_resume_decides_as_an_unlimited_one(
    cli: typer.Typer, tmp_path: Path
) -> None:
    """docs/design.md L3: the budget is the whole sweep's, checked between rounds that give every
    setting the same tasks; --resume with a raised one completes it."""
    chats = [{"id": f"c{i}", "turns": [f"just chatting {i}", "remember: I like tea"],
              "checks": [{"contains": "tea"}]} for i in range(5)]  # fmt: skip
    suite = write_suite(tmp_path / "chats.jsonl", chats)
    triggers = ["-t", "off", "-t", "step-count:1"]
    full = tmp_path / "whole"  # the same length as "split": a task's prompts hold its paths
    unlimited = CliRunner().invoke(cli, ["sweep", str(suite), *triggers, "--out", str(full), "-q", "-P", "1"])
    assert unlimited.exit_code == 0, unlimited.output
    per_round = {t: _store_tokens(full / "off", t) + _store_tokens(full / "step-count-1", t) for t in ("c0", "c1")}
    budget = per_round["c0"] + per_round["c1"] // 2  # reached during the second round
    out = tmp_path / "split"
    first = CliRunner().invoke(cli, ["sweep", str(suite), *triggers, "--out", str(out), "-q", "-P", "1",
                                     "--max-tokens", str(budget)])  # fmt: skip
    assert first.exit_code == 4, first.output
    assert "Traceback" not in first.output
    assert "stopped at sweep.tokens: off ran 2/5, step-count-1 ran 2/5" in first.output
    assert "Stopped at the sweep's tokens limit (sweep.tokens)" in first.output
    stopped = json.loads((out / "summary.json").read_text())["sweep_limit"]
    assert stopped["ran"] == {"off": 2, "step-count-1": 2} and stopped["of"] == 5
    ran = {label: [json.loads(line)["id"] for line in (out / label / "results.jsonl").read_text().splitlines()]
           for label in ("off", "step-count-1")}  # fmt: skip
    assert ran == {"off": ["c0", "c1"], "step-count-1": ["c0", "c1"]}, "the settings stay paired"
    spent = sum(_store_tokens(out / label, t) for label in ran for t in ran[label])
    assert stopped["spent"] == spent, "the sweep's spend is what the tasks' stores recorded"
    assert spent >= budget > spent - per_round["c1"], "launching stopped at the round that reached the budget"
    assert not (out / "off" / "home" / "stores" / "c2.sqlite3").exists(), "no task after the limit started"
    again = CliRunner().invoke(cli, ["sweep", str(suite), "--out", str(out), "-q", "--resume", "--max-tokens", str(10 * budget)])
    assert again.exit_code == 0, again.output
    resumed, whole = (json.loads((d / "summary.json").read_text()) for d in (out, full))
    assert resumed["sweep_limit"] is None

    def decision(summary: dict[str, object]) -> object:
        rows = [{k: r[k] for k in ("setting", "quality", "samples", "passed", "reflections", "outcomes")}
                for r in summary["settings"]]  # type: ignore[attr-defined]  # fmt: skip
        return rows, summary["front"], summary["recommendation"], summary["paired"]

    assert decision(resumed) == decision(whole), "the resumed sweep decides as the unlimited one"


def _store_tokens(out: Path, task_id: str) -> int:
    """A task's tokens as its own store recorded them, one ``model.call`` event per request."""
    with sqlite3.connect(out / "home" / "stores" / f"{task_id}.sqlite3") as conn:
        rows = conn.execute("SELECT payload FROM events WHERE kind = 'model.call'").fetchall()
    return sum(json.loads(p)["prompt_tokens"] + json.loads(p)["completion_tokens"] for (p,) in rows)


def test_a_task_over_its_token_limit_is_recorded_limit_with_the_limit_named(cli: typer.Typer, tmp_path: Path) -> None:
    suite = write_suite(tmp_path / "long.jsonl", [
        {"id": "long", "turns": [f"turn {i}: tell me more" for i in range(8)], "settings": {"reflection_trigger": "off"},
         "checks": [{"contains": "turn 7"}]},
        {"id": "short", "turns": ["hi"], "settings": {"reflection_trigger": "off"}, "checks": [{"contains": "hi"}]},
    ])  # fmt: skip
    out = tmp_path / "out"
    result = CliRunner().invoke(
        cli, ["run", str(suite), "--out", str(out), "-q", "-P", "1"], env={"REVERIE_LIMIT_TASK_TOKENS": "6000"}
    )
    assert result.exit_code == 4, result.output
    rows = {json.loads(line)["id"]: json.loads(line) for line in (out / "results.jsonl").read_text().splitlines()}
    assert rows["short"]["status"] == "passed"
    assert rows["long"]["status"] == "limit" and rows["long"]["limit"] == "task.tokens"
    assert rows["long"]["tokens_in"] + rows["long"]["tokens_out"] <= 6000 and 0 < rows["long"]["turns"] < 8
    assert "limit long: turn" in result.output and "task tokens limit" in result.output
    assert json.loads((out / "summary.json").read_text())["limit"] == 1

"""``--retry-failed``, ``--task``, ``--limit`` and the terminal table, through the command line."""

from __future__ import annotations

import io
import json
from pathlib import Path
from typing import Any

import pytest
import typer
from rich.console import Console
from typer.testing import CliRunner

from orchestrator.batch.results import TaskResult, summarize
from orchestrator.cli.batch import register
from orchestrator.cli.batch_output import command_line, results_table
from tests.batch.helpers import TINY, write_suite


@pytest.fixture
def cli() -> typer.Typer:
    app = typer.Typer()
    register(app)
    return app


def _lines(out: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in (out / "results.jsonl").read_text().splitlines()]


def test_retry_failed_reruns_only_failures_in_place(cli: typer.Typer, tmp_path: Path) -> None:
    tasks = [TINY[0], TINY[2], TINY[4]]
    suite = write_suite(tmp_path / "s.jsonl", tasks)
    out = tmp_path / "run"
    first = CliRunner().invoke(cli, ["run", str(suite), "--out", str(out), "-q", "-j", "2", "--price-in", "2"])
    assert first.exit_code == 1, first.output
    before = {r["id"]: r for r in _lines(out)}
    assert {i: r["status"] for i, r in before.items()} == {"rule": "passed", "chat": "passed", "wrong": "failed"}
    kept_log = (out / "events" / "rule.jsonl").read_bytes()
    first_elapsed = json.loads((out / "summary.json").read_text())["elapsed_total"]

    # the user fixes the failing task, then retries only that (a broken template is refused before
    # anything runs: tests/batch/test_template_check.py)
    fixed = [TINY[0], TINY[2], {**TINY[4], "checks": [{"contains": "hello"}]}]
    write_suite(suite, fixed)
    again = CliRunner().invoke(cli, ["run", "--retry-failed", str(out), "-q"])
    assert again.exit_code == 0, again.output
    assert "retried: 2 task(s) kept, 1 run now" in again.output
    after = _lines(out)
    assert [r["id"] for r in after] == [r["id"] for r in before.values()], "one line per task, in the old order"
    by_id = {r["id"]: r for r in after}
    assert {i: r["status"] for i, r in by_id.items()} == dict.fromkeys(by_id, "passed")
    assert {i: r["attempts"] for i, r in by_id.items()} == {"rule": 1, "chat": 1, "wrong": 2}
    assert by_id["rule"] == before["rule"] and by_id["chat"] == before["chat"]
    assert (out / "events" / "rule.jsonl").read_bytes() == kept_log, "a kept task is not touched"
    assert all(r["cost"] is not None for r in after), "the retry reused the run's recorded prices"
    summary = json.loads((out / "summary.json").read_text())
    assert (summary["tasks"], summary["passed"]) == (3, 3)
    assert summary["elapsed_total"] == pytest.approx(first_elapsed + summary["elapsed"], abs=0.002)
    assert json.loads((out / "run.json").read_text())["concurrency"] == 2

    nothing = CliRunner().invoke(cli, ["run", "--retry-failed", str(out), "-q"])
    assert nothing.exit_code == 0 and "retrying 0 failed or errored task(s)" in nothing.output
    assert {r["id"]: r["attempts"] for r in _lines(out)} == {"rule": 1, "chat": 1, "wrong": 2}


def test_retry_failed_needs_a_run_directory(cli: typer.Typer, tmp_path: Path) -> None:
    result = CliRunner().invoke(cli, ["run", "--retry-failed", str(tmp_path)])
    assert result.exit_code == 1 and "no run.json here" in result.output
    (tmp_path / "off").mkdir()
    (tmp_path / "off" / "run.json").write_text("{}")
    sweep = CliRunner().invoke(cli, ["run", "--retry-failed", str(tmp_path)])
    assert sweep.exit_code == 1 and f"give one setting's directory, e.g. {tmp_path / 'off'}" in sweep.output


def test_resume_without_out_reuses_the_default_directorys_options(
    cli: typer.Typer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    suite = write_suite(tmp_path / "s.jsonl", [TINY[2], TINY[4]])
    first = CliRunner().invoke(cli, ["run", str(suite), "-q", "--task", "chat", "-j", "3", "--price-out", "1"])
    assert first.exit_code == 0, first.output
    resumed = CliRunner().invoke(cli, ["run", str(suite), "-q", "--resume"])
    assert resumed.exit_code == 1 and "concurrency 3" in resumed.output
    rows = _lines(tmp_path / "runs" / "s")
    assert sorted(r["id"] for r in rows) == ["chat", "wrong"] and all(r["cost"] is not None for r in rows)


def test_task_and_limit_choose_what_runs(cli: typer.Typer, tmp_path: Path) -> None:
    suite = write_suite(tmp_path / "s.jsonl")
    picked = CliRunner().invoke(cli, ["run", str(suite), "--out", str(tmp_path / "a"), "-q", "--task", "wrong",
                                      "--task", "chat"])
    assert picked.exit_code == 1, picked.output
    assert sorted(r["id"] for r in _lines(tmp_path / "a")) == ["chat", "wrong"]
    assert json.loads((tmp_path / "a" / "run.json").read_text())["tasks"] == ["chat", "wrong"]

    limited = CliRunner().invoke(cli, ["run", str(suite), "--out", str(tmp_path / "b"), "-q", "--limit", "2"])
    assert limited.exit_code == 0, limited.output
    assert sorted(r["id"] for r in _lines(tmp_path / "b")) == ["fact", "rule"]

    unknown = CliRunner().invoke(cli, ["run", str(suite), "--out", str(tmp_path / "c"), "--task", "nope"])
    assert unknown.exit_code == 1
    assert "--task 'nope': no such task in the suite (tasks: rule, fact, chat, seeded, wrong)" in unknown.output
    assert not (tmp_path / "c").exists()


def _result(task_id: str, cost: float | None, wall: float) -> TaskResult:
    return TaskResult(id=task_id, status="passed", checks_passed=1, checks_total=1, turns=8, steps=9,
                      tokens_in=16_146, tokens_out=545, cost=cost, wall_time=wall, memory_head="543c0d68c95e")


def test_table_keeps_whole_ids_and_shows_real_time_and_cost() -> None:
    results = [_result("compact-sliding-window-recall", 0.0123, 1.66),
               _result("compact-sliding-window-summary", 0.0101, 1.40)]
    summary = summarize(results, elapsed=1.71)
    for width in (80, 100, 200):
        buffer = io.StringIO()
        Console(file=buffer, width=width).print(results_table(results, summary, "t", width=width))
        text = buffer.getvalue()
        assert max(len(line) for line in text.splitlines()) <= width
        assert "compact-sliding-window-recall" in text and "compact-sliding-window-summary" in text, text
        assert "1.71 real" in text, text
        assert "0.0224" in text and "16,146" in text, "tokens and the cost total always stay"
        assert ("not shown" in text) == (width < 200)
    unpriced = [_result("a", None, 1.0)]
    buffer = io.StringIO()
    Console(file=buffer, width=200).print(results_table(unpriced, summarize(unpriced, elapsed=1.0), "t", width=200))
    assert "cost" not in buffer.getvalue() and "1.00 real" in buffer.getvalue()


def test_command_line_is_one_shell_line() -> None:
    line = command_line(["run", Path("my suite.jsonl")], {"--out": Path("runs/x"), "--resume": True, "-j": 4,
                                                          "--model": None, "--task": ["a", "b"], "--quiet": False})
    assert line == "reverie run 'my suite.jsonl' --out runs/x --resume -j 4 --task a --task b"

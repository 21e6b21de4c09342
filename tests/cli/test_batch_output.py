"""What ``reverie run`` prints while it runs: a reflection failure in any task is shown above the
live bar (or on stderr with ``--quiet``), never only written to the event log (O12)."""

from __future__ import annotations

import io
from pathlib import Path

import pytest
from rich.console import Console

from orchestrator.batch.results import TaskResult
from orchestrator.cli.batch_output import RunProgress, progress_bar, sweep_table

pytestmark = pytest.mark.anyio


async def test_a_reflection_failure_is_printed_above_the_bar() -> None:
    out = io.StringIO()
    console = Console(file=out, width=200, force_terminal=False)
    with progress_bar(True, console) as bar:
        live = RunProgress(bar, total=2)
        await live.on_event("reflect-one", "reflection.failed", {"error": "git reset failed\nfatal: index.lock"})
        await live.on_event("reflect-one", "turn.end", {})
    assert "⚠ reflection failed (reflect-one): git reset failed fatal: index.lock" in out.getvalue()
    assert live.stats()["turns"] == 1


async def test_with_quiet_the_failure_goes_to_stderr(capsys: pytest.CaptureFixture[str]) -> None:
    live = RunProgress(None, total=1)
    await live.on_event("t", "reflection.failed", {"error": "boom"})
    assert capsys.readouterr().err.strip() == "⚠ reflection failed (t): boom"


def test_a_printed_command_names_reverie_as_the_user_can_run_it(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from orchestrator.cli.errors import program

    script = tmp_path / "venv" / "bin" / "reverie"
    script.parent.mkdir(parents=True)
    script.write_text("#!/bin/sh\n", encoding="utf-8")
    script.chmod(0o755)
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("PATH", "/usr/bin:/bin")
    assert program(str(script)) == "venv/bin/reverie", "not on PATH: the path it was started as"
    monkeypatch.setenv("PATH", f"{script.parent}:/usr/bin:/bin")
    assert program(str(script)) == "reverie", "on PATH (an activated venv): the bare name"
    assert program("-c") == "reverie"


async def test_a_resumed_run_counts_the_whole_run_and_says_so() -> None:
    earlier = [
        TaskResult(id="a", status="passed", checks_passed=1, checks_total=1, turns=2, compactions=3),
        TaskResult(id="b", status="failed", checks_passed=0, checks_total=1, turns=1, compactions=1),
    ]
    out = io.StringIO()
    console = Console(file=out, width=200, force_terminal=False)
    with progress_bar(True, console) as bar:
        live = RunProgress(bar, total=3, earlier=earlier)
        await live.on_event("c", "compaction.done", {})
        await live.on_result(TaskResult(id="c", status="passed", checks_passed=1, checks_total=1, turns=4, compactions=2))
    line = out.getvalue()
    assert "whole run" in line and "3/3" in line and "✓ 2 ✗ 1" in line, line
    assert "turns 7" in line and "compactions 6" in line, line


async def test_a_fresh_run_is_labelled_run() -> None:
    out = io.StringIO()
    with progress_bar(True, Console(file=out, width=200, force_terminal=False)) as bar:
        RunProgress(bar, total=1)
    assert out.getvalue().startswith("run ") and "whole run" not in out.getvalue()


def _sweep_summary() -> dict[str, object]:
    outcomes = {"merged": 3, "resolved": 1, "no_changes": 12, "pending": 0, "kept": 1, "failed": 0}
    settings = [
        {"setting": name, "samples": 30, "main_tokens_in": 1_234_567, "main_tokens_out": 45_678,
         "subagent_tokens_in": 234_567, "subagent_tokens_out": 12_345, "cost": None, "reflections": 17,
         "outcomes": outcomes, "memory_bytes": 12_345, "elapsed": 123.4,
         "quality": {"mean": 0.8, "low": 0.61, "high": 0.93}}
        for name in ("off", "compaction-event", "step-count:5", "step-count:25")
    ]
    return {"settings": settings, "front": ["step-count:25"]}


def test_the_sweep_table_fits_80_columns_without_cutting_a_name() -> None:
    out = io.StringIO()
    console = Console(file=out, width=80, force_terminal=False)
    console.print(sweep_table(_sweep_summary(), "sweep of s.jsonl", width=console.width))
    lines = out.getvalue().splitlines()
    text = "\n".join(lines)
    assert max(len(line) for line in lines) <= 80 and "…" not in text, text
    for name in ("off", "compaction-event", "step-count:5", "step-count:25 *", "0.800 [0.61, 0.93]"):
        assert name in text, text
    assert "(narrow terminal: " in text and "memory B" in text.split("(narrow terminal: ")[1]
    headers = next(line for line in lines if "setting" in line)
    shown = [cell.strip() for cell in headers.split("┃") if cell.strip()]
    hidden = text.split("(narrow terminal: ")[1].split(" not shown)")[0].replace("\n", " ").split(", ")
    assert len(shown) + len(hidden) == 16, (shown, hidden)


def test_a_wide_terminal_shows_every_sweep_column() -> None:
    out = io.StringIO()
    Console(file=out, width=200, force_terminal=False).print(sweep_table(_sweep_summary(), "t", width=200))
    assert "narrow terminal" not in out.getvalue() and "no_changes" in out.getvalue() and "memory B" in out.getvalue()


async def test_a_resumed_sweep_setting_says_whole_run_beside_its_label() -> None:
    out = io.StringIO()
    earlier = [TaskResult(id="a", status="passed", checks_passed=1, checks_total=1)]
    with progress_bar(True, Console(file=out, width=200, force_terminal=False)) as bar:
        RunProgress(bar, total=2, earlier=earlier, name="step-count-5")
    assert out.getvalue().startswith("step-count-5 (whole run) ") and "1/2" in out.getvalue(), out.getvalue()

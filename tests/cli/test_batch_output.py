"""What ``reverie run`` prints while it runs: a reflection failure in any task is shown above the
live bar (or on stderr with ``--quiet``), never only written to the event log (O12)."""

from __future__ import annotations

import io
from pathlib import Path

import pytest
from rich.console import Console

from orchestrator.batch.results import TaskResult
from orchestrator.cli.batch_output import RunProgress, progress_bar

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

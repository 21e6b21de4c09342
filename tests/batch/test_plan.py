"""What a resumed or retried run keeps: the results it counts as done before it starts (the
progress line counts the whole run from them, ``cli/batch_output.RunProgress``)."""

from __future__ import annotations

from pathlib import Path

import typer
from typer.testing import CliRunner

from orchestrator.batch.plan import plan_run, plan_sweep
from orchestrator.batch.request import BatchRequest
from orchestrator.cli.batch import register
from tests.batch.helpers import TINY, write_suite


def test_resume_and_retry_keep_the_results_they_will_not_rerun(tmp_path: Path) -> None:
    rule, chat, wrong = TINY[0], TINY[2], TINY[4]
    out = tmp_path / "out"
    app = typer.Typer()
    register(app)
    first = CliRunner().invoke(app, ["run", str(write_suite(tmp_path / "two.jsonl", [rule, wrong])), "--out", str(out), "-q"])
    assert first.exit_code == 1, first.output  # "wrong" fails its check

    resumed = plan_run(BatchRequest(write_suite(tmp_path / "three.jsonl", [rule, chat, wrong]), out, resume=True))
    assert resumed.todo == {"chat"}
    assert [(r.id, r.status) for r in resumed.kept] == [("rule", "passed"), ("wrong", "failed")]

    retried = plan_run(BatchRequest(None, retry_failed=out))
    assert retried.todo == {"wrong"}
    assert [r.id for r in retried.kept] == ["rule"]

    fresh = plan_run(BatchRequest(tmp_path / "three.jsonl", tmp_path / "elsewhere"))
    assert fresh.kept == ()


def test_a_resumed_sweep_keeps_each_setting_s_results(tmp_path: Path) -> None:
    rule, fact = TINY[0], TINY[1]
    out = tmp_path / "sweep"
    app = typer.Typer()
    register(app)
    first = CliRunner().invoke(
        app, ["sweep", str(write_suite(tmp_path / "one.jsonl", [rule])), "--trigger", "off", "--out", str(out), "-q"]
    )
    assert first.exit_code == 0, first.output

    resumed = plan_sweep(BatchRequest(write_suite(tmp_path / "two.jsonl", [rule, fact]), out, resume=True))
    assert [s.label for s in resumed.settings] == ["off"] and resumed.per_setting == 2
    assert {label: [r.id for r in results] for label, results in resumed.kept.items()} == {"off": ["rule"]}

"""``reverie run --resume`` / ``--retry-failed`` run the rest with the ``--processes`` their
run.json recorded unless the flag is given again, and say which on stderr; real runs on the
scripted model (CliRunner: the driver is this process, so a task's ``worker_pid`` tells where it ran)."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest
import typer
from typer.testing import CliRunner

from orchestrator.cli.batch import register
from tests.batch.helpers import EXPECTED, TINY, write_suite

_COPIES = 3


@pytest.fixture
def cli() -> typer.Typer:
    app = typer.Typer()
    register(app)
    return app


def _suite(tmp_path: Path) -> Path:
    return write_suite(tmp_path / "s.jsonl", [{**t, "id": f"{t['id']}-{k}"} for k in range(_COPIES) for t in TINY])


def _results(out: Path) -> dict[str, dict[str, Any]]:
    return {r["id"]: r for r in (json.loads(line) for line in (out / "results.jsonl").read_text().splitlines())}


def _meta(out: Path) -> dict[str, Any]:
    return dict(json.loads((out / "run.json").read_text()))


def _expected() -> dict[str, str]:
    return {f"{name}-{k}": status for k in range(_COPIES) for name, status in EXPECTED.items()}


def test_resume_reuses_the_recorded_processes_and_a_given_flag_overrides(cli: typer.Typer, tmp_path: Path) -> None:
    suite, out = _suite(tmp_path), tmp_path / "out"
    base = ["run", str(suite), "--out", str(out), "-q", "--scripted-latency", "0.2"]
    first = CliRunner().invoke(cli, [*base, "-j", "2", "--processes", "2", "--limit", "3"])
    assert first.exit_code == 0, first.output
    assert (_meta(out)["processes"], _meta(out)["concurrency"]) == (2, 2)
    started = set(_results(out))

    override = CliRunner().invoke(cli, [*base, "--resume", "--processes", "1", "--limit", "6"])
    assert override.exit_code == 1, override.output  # wrong-0 fails by design
    assert f"resuming with --processes 1 (given; {out / 'run.json'} had 2)" in override.output
    assert _meta(out)["processes"] == 1
    in_driver = set(_results(out)) - started
    assert len(in_driver) == 3
    assert {_results(out)[i]["worker_pid"] for i in in_driver} == {os.getpid()}, "--processes 1: all in this process"

    two = CliRunner().invoke(cli, [*base, "-j", "2", "--resume", "--processes", "2"])
    assert two.exit_code == 1, two.output  # the suite's "wrong" tasks fail by design
    assert "resuming with --processes 2 (given" in two.output
    assert _meta(out)["processes"] == 2
    rest = set(_results(out)) - started - in_driver
    assert rest and {_results(out)[i]["worker_pid"] for i in rest} - {os.getpid()}, "a worker process ran some"
    assert {i: r["status"] for i, r in _results(out).items()} == _expected()


def test_resume_without_the_flag_runs_the_rest_as_recorded(cli: typer.Typer, tmp_path: Path) -> None:
    suite, out = _suite(tmp_path), tmp_path / "out"
    base = ["run", str(suite), "--out", str(out), "-q", "--scripted-latency", "0.2"]
    first = CliRunner().invoke(cli, [*base, "-j", "2", "--processes", "2", "--limit", "3"])
    assert first.exit_code == 0, first.output
    started = set(_results(out))
    resumed = CliRunner().invoke(cli, [*base, "--resume"])
    assert resumed.exit_code == 1, resumed.output
    assert f"resuming with --processes 2, as {out / 'run.json'} records" in resumed.output
    assert (_meta(out)["processes"], _meta(out)["concurrency"]) == (2, 2)
    rest = set(_results(out)) - started
    assert len(rest) == len(_expected()) - 3
    assert {_results(out)[i]["worker_pid"] for i in rest} - {os.getpid()}, "a worker process ran some"
    assert {i: r["status"] for i, r in _results(out).items()} == _expected()


def test_retry_failed_reuses_the_recorded_processes(cli: typer.Typer, tmp_path: Path) -> None:
    suite, out = write_suite(tmp_path / "s.jsonl", [TINY[2], TINY[4]]), tmp_path / "out"
    first = CliRunner().invoke(cli, ["run", str(suite), "--out", str(out), "-q", "-j", "2", "--processes", "2"])
    assert first.exit_code == 1, first.output
    again = CliRunner().invoke(cli, ["run", "--retry-failed", str(out), "-q"])
    assert again.exit_code == 1, again.output
    assert f"retrying with --processes 2, as {out / 'run.json'} records" in again.output
    assert (_meta(out)["processes"], _meta(out)["concurrency"]) == (2, 2)
    assert _results(out)["wrong"]["attempts"] == 2


def test_a_run_json_without_processes_or_with_a_bad_one(cli: typer.Typer, tmp_path: Path) -> None:
    suite, out = write_suite(tmp_path / "s.jsonl", [TINY[2]]), tmp_path / "out"
    first = CliRunner().invoke(cli, ["run", str(suite), "--out", str(out), "-q", "--limit", "1"])
    assert first.exit_code == 0, first.output
    assert _meta(out)["processes"] == "auto", "the default as given"
    meta = _meta(out)
    del meta["processes"]  # as an older reverie wrote it
    (out / "run.json").write_text(json.dumps(meta))
    older = CliRunner().invoke(cli, ["run", str(suite), "--out", str(out), "-q", "--resume"])
    assert older.exit_code == 0, older.output
    assert "resuming with" not in older.output
    assert _meta(out)["processes"] == "auto"

    (out / "run.json").write_text(json.dumps({**meta, "processes": "many"}))
    bad = CliRunner().invoke(cli, ["run", str(suite), "--out", str(out), "-q", "--resume"])
    assert bad.exit_code == 1
    lines = [line for line in bad.output.splitlines() if line.strip() and not line.startswith("resuming with")]
    assert lines == [f"reverie: error: {out / 'run.json'}: processes 'many': use auto or a whole number of processes "
                     "(1 = every task in this process)"], bad.output

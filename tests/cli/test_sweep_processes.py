"""``reverie sweep --processes``: every setting runs through the executor ``run`` would choose (a
worker process takes part of each), with the statuses of an in-process sweep, and the flag is
checked as ``run`` checks it."""

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

_SETTINGS = ("off", "step-count-1")


@pytest.fixture
def cli() -> typer.Typer:
    app = typer.Typer()
    register(app)
    return app


def _results(run_dir: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in (run_dir / "results.jsonl").read_text().splitlines()]


def test_a_sweep_over_two_processes_gives_the_statuses_of_one(cli: typer.Typer, tmp_path: Path) -> None:
    suite = write_suite(tmp_path / "s.jsonl", [{**t, "id": f"{t['id']}-{k}"} for k in range(2) for t in TINY])
    expected = {f"{name}-{k}": status for k in range(2) for name, status in EXPECTED.items()}
    statuses: dict[str, dict[str, dict[str, str]]] = {}
    ran_by: dict[str, set[int]] = {}
    for processes in ("1", "2"):
        out = tmp_path / f"p{processes}"
        result = CliRunner().invoke(cli, [
            "sweep", str(suite), "--trigger", "off", "--trigger", "step-count:1", "--out", str(out), "-q", "-j", "4",
            "--processes", processes, "--scripted-latency", "0.2", "--override-pinned",
        ])
        assert result.exit_code == 0, result.output
        statuses[processes] = {}
        ran_by[processes] = set()
        for label in _SETTINGS:
            assert json.loads((out / label / "run.json").read_text())["processes"] == int(processes)
            results = _results(out / label)
            statuses[processes][label] = {r["id"]: r["status"] for r in results}
            ran_by[processes] |= {r["worker_pid"] for r in results}
    assert statuses["1"] == statuses["2"] == dict.fromkeys(_SETTINGS, expected)
    assert ran_by["1"] == {os.getpid()}
    assert ran_by["2"] - {os.getpid()}, "a worker process ran tasks of the sweep"


@pytest.mark.parametrize(("value", "says"), [("0", "at least 1"), ("many", "use auto or a whole number"),
                                             ("5", "needs --concurrency 5")])
def test_bad_processes_on_a_sweep_are_one_line(cli: typer.Typer, tmp_path: Path, value: str, says: str) -> None:
    suite = write_suite(tmp_path / "s.jsonl", [TINY[2]])
    result = CliRunner().invoke(
        cli, ["sweep", str(suite), "--trigger", "off", "--out", str(tmp_path / "o"), "-q", "-j", "2", "--processes", value]
    )
    assert result.exit_code != 0
    lines = [line for line in result.output.splitlines() if line.strip()]
    assert len(lines) == 1 and says in lines[0] and "--processes" in lines[0], result.output
    assert not (tmp_path / "o").exists(), "nothing ran"


def test_resume_finishes_a_sweep_with_what_it_recorded(cli: typer.Typer, tmp_path: Path) -> None:
    suite = write_suite(tmp_path / "s.jsonl", TINY)
    out = tmp_path / "sweep"
    first = CliRunner().invoke(cli, [
        "sweep", str(suite), "-t", "off", "-t", "step-count:1", "--out", str(out), "-q", "-j", "2",
        "--processes", "1", "--scripted-latency", "0.05", "--override-pinned",
    ])
    assert first.exit_code == 0, first.output
    kept = (out / "off" / "results.jsonl").read_bytes()
    for name in ("results.jsonl", "summary.json"):  # as if interrupted before the second setting ran
        (out / "step-count-1" / name).unlink()
    resumed = CliRunner().invoke(cli, ["sweep", str(suite), "--out", str(out), "--resume", "-q"])
    assert resumed.exit_code == 0, resumed.output
    assert "resuming the settings" in resumed.output and "off, step-count-1" in resumed.output
    assert (out / "off" / "results.jsonl").read_bytes() == kept
    rerun = json.loads((out / "step-count-1" / "run.json").read_text())
    assert (rerun["concurrency"], rerun["processes"], rerun["options"]["latency"]) == (2, 1, 0.05)
    assert {r["id"]: r["status"] for r in _results(out / "step-count-1")} == EXPECTED


@pytest.mark.parametrize(("args", "says"), [
    (["--resume"], "no sweep.json here to resume"),
    ([], "give at least one reflection trigger to compare (--trigger: off, compaction-event"),
])
def test_a_sweep_without_settings_is_one_line(cli: typer.Typer, tmp_path: Path, args: list[str], says: str) -> None:
    suite = write_suite(tmp_path / "s.jsonl", [TINY[2]])
    result = CliRunner().invoke(cli, ["sweep", str(suite), "--out", str(tmp_path / "none"), "-q", *args])
    assert result.exit_code != 0
    assert says in result.output and "Traceback" not in result.output

"""Ctrl-C on a real ``reverie run`` process: it stops cleanly (exit 130, a one-line resume command
with the run's own options, finished tasks recorded) and that command finishes only the missing tasks."""

from __future__ import annotations

import json
import os
import shlex
import signal
import subprocess
import sys
from pathlib import Path

import pytest
import typer
from typer.testing import CliRunner

from orchestrator.batch.results import RESULTS_FILE
from orchestrator.cli.batch import register
from tests.batch.helpers import LAUNCH_CLI
from tests.support import wait_until

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.slow
def test_sigint_then_resume(tmp_path: Path) -> None:
    lines = (ROOT / "examples" / "suite.jsonl").read_text().splitlines()[:8]
    suite = tmp_path / "s.jsonl"
    suite.write_text("\n".join(lines) + "\n")
    out = tmp_path / "out"
    proc = subprocess.Popen(
        [sys.executable, "-c", LAUNCH_CLI, "run", str(suite), "--out", str(out), "-q", "-j", "2", "--price-in", "3"],
        cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=dict(os.environ),
    )
    results = out / RESULTS_FILE
    wait_until(
        lambda: proc.poll() is not None or (results.exists() and results.read_text().count("\n") >= 1),
        timeout=120, what="the run's first result",
    )  # fmt: skip
    assert proc.poll() is None, "the run ended before the interrupt"
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 130, err.decode()
    assert b"Traceback" not in err
    hint = shlex.split(err.decode().strip().splitlines()[-1])
    assert hint[:3] == ["reverie", "run", str(suite)]
    assert "--resume" in hint and hint[hint.index("--concurrency") + 1] == "2" and "--price-in" in hint
    done = [json.loads(line)["id"] for line in (out / RESULTS_FILE).read_text().splitlines()]
    assert 1 <= len(done) < 8

    app = typer.Typer()
    register(app)
    result = CliRunner().invoke(app, hint[1:])
    assert result.exit_code == 0, result.output
    assert f"{len(done)} task(s) already done, {8 - len(done)} run now" in result.output
    final = [json.loads(line) for line in (out / RESULTS_FILE).read_text().splitlines()]
    assert sorted(r["id"] for r in final) == sorted(json.loads(line)["id"] for line in lines)
    assert all(r["status"] == "passed" for r in final)
    assert all(r["cost"] is not None for r in final), "the resumed run kept the recorded prices"
    assert json.loads((out / "run.json").read_text())["concurrency"] == 2

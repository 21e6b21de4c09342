"""Ctrl-C on a real ``reverie run`` process: it stops cleanly (exit 130, a resume hint, finished
tasks recorded) and ``--resume`` finishes only the missing tasks."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import typer
from typer.testing import CliRunner

from orchestrator.batch.results import RESULTS_FILE
from orchestrator.cli.batch import register

ROOT = Path(__file__).resolve().parents[2]
_LAUNCH = """
import signal, sys
signal.signal(signal.SIGINT, signal.default_int_handler)
import typer
from orchestrator.cli.batch import register
app = typer.Typer()
register(app)
app(sys.argv[1:])
"""


@pytest.mark.slow
def test_sigint_then_resume(tmp_path: Path) -> None:
    lines = (ROOT / "examples" / "suite.jsonl").read_text().splitlines()[:8]
    suite = tmp_path / "s.jsonl"
    suite.write_text("\n".join(lines) + "\n")
    out = tmp_path / "out"
    proc = subprocess.Popen(
        [sys.executable, "-c", _LAUNCH, "run", str(suite), "--out", str(out), "-q"],
        cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=dict(os.environ),
    )
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and proc.poll() is None:
        results = out / RESULTS_FILE
        if results.exists() and results.read_text().count("\n") >= 1:
            break
        time.sleep(0.05)
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 130, err.decode()
    assert b"--resume" in err and b"Traceback" not in err
    done = [json.loads(line)["id"] for line in (out / RESULTS_FILE).read_text().splitlines()]
    assert 1 <= len(done) < 8

    app = typer.Typer()
    register(app)
    result = CliRunner().invoke(app, ["run", str(suite), "--out", str(out), "-q", "--resume", "-j", "4"])
    assert result.exit_code == 0, result.output
    assert f"{len(done)} task(s) already done, {8 - len(done)} run now" in result.output
    final = [json.loads(line) for line in (out / RESULTS_FILE).read_text().splitlines()]
    assert sorted(r["id"] for r in final) == sorted(json.loads(line)["id"] for line in lines)
    assert all(r["status"] == "passed" for r in final)

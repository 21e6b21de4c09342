"""D15: ``reverie run`` and ``reverie sweep`` read the user's ``$REVERIE_HOME/config.toml``
as ``chat`` does (flag > environment > suite > config > defaults), and a broken config stops them
with chat's one-line error before anything runs."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

_TASKS = [
    {"id": "plain", "turns": ["hello there"], "checks": [{"where": "answer", "contains": "hello there"}]},
    {
        "id": "suite-window",
        "turns": ["hello there"],
        "settings": {"context_window": 128000},
        "checks": [{"where": "answer", "contains": "hello there"}],
    },
]


def _reverie(*args: str, env: dict[str, str] | None = None, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "orchestrator", *args],
        capture_output=True,
        text=True,
        env={**os.environ, **(env or {})},
        cwd=cwd,
        timeout=300,
    )


def _suite(tmp_path: Path) -> Path:
    path = tmp_path / "suite.jsonl"
    path.write_text("".join(json.dumps(t) + "\n" for t in _TASKS), encoding="utf-8")
    return path


def _results(out: Path) -> dict[str, dict[str, object]]:
    lines = (out / "results.jsonl").read_text(encoding="utf-8").splitlines()
    return {r["id"]: r for r in map(json.loads, lines)}


def _config(text: str) -> None:
    Path(os.environ["REVERIE_HOME"], "config.toml").write_text(text, encoding="utf-8")


@pytest.mark.slow
def test_run_applies_the_config_file_under_suite_environment_and_flags(tmp_path: Path) -> None:
    _config("[compaction]\ncontext_window = 600\n")
    suite = _suite(tmp_path)
    _reverie("run", str(suite), "--out", str(tmp_path / "config"), "-q")
    got = _results(tmp_path / "config")
    assert got["plain"]["status"] == "error" and "600 tokens" in str(got["plain"]["error"]), "config applies"
    assert got["suite-window"]["status"] == "passed", "the suite's setting beats the config file"

    _reverie("run", str(suite), "--out", str(tmp_path / "env"), "-q", env={"REVERIE_CONTEXT_WINDOW": "700"})
    got = _results(tmp_path / "env")
    assert "700 tokens" in str(got["suite-window"]["error"]), "the environment beats the suite"

    env = {"REVERIE_CONTEXT_WINDOW": "700"}
    _reverie("run", str(suite), "--out", str(tmp_path / "flag"), "-q", "--context-window", "64000", env=env)
    assert {r["status"] for r in _results(tmp_path / "flag").values()} == {"passed"}, "a flag beats everything"


@pytest.mark.parametrize("command", [["run"], ["sweep", "--trigger", "off"]])
def test_a_broken_config_stops_run_and_sweep_with_chats_line(tmp_path: Path, command: list[str]) -> None:
    _config("[turn\nmax_steps = 3\n")
    chat = _reverie("chat", "-p", "hi")
    out = tmp_path / "out"
    batch = _reverie(command[0], str(_suite(tmp_path)), *command[1:], "--out", str(out), "-q")
    assert chat.returncode != 0 and batch.returncode == chat.returncode
    assert batch.stderr.strip() == chat.stderr.strip() and len(batch.stderr.strip().splitlines()) == 1
    assert "config.toml" in batch.stderr and "not valid TOML" in batch.stderr
    assert not (out / "results.jsonl").exists() and not any(out.rglob("results.jsonl")) if out.exists() else True

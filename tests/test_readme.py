"""Every concrete ``reverie …`` command the README shows runs as written once the venv is activated
(its ``bin`` first on ``PATH``, as ``. .venv/bin/activate`` does), in a fresh home; commands with
placeholders (``SUITE``, ``[--json]``, ``…``) are the table's synopses, not commands to type."""

from __future__ import annotations

import os
import re
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
_COMMAND = re.compile(r"`(reverie [^`]*)`")
_SYNOPSIS = re.compile(r"[A-Z]{2,}|[\[\]|…]|\\")
_PROSE = {
    "reverie chat": "the interactive REPL (tests/cli/test_chat_terminal.py drives it in a terminal)",
    "reverie chat -p": "names the flag in a sentence",
    "reverie run --scripted-latency": "names the flag in a sentence",
    "reverie stress": "names the command in a sentence",
    "reverie sweep": "names the command in a sentence",
    "reverie --install-completion": "would change the shell's start-up files of whoever runs the tests",
}


def _commands() -> list[str]:
    found = _COMMAND.findall((ROOT / "README.md").read_text(encoding="utf-8"))
    commands = {" ".join(c.split()) for c in found}
    return sorted(c for c in commands if not _SYNOPSIS.search(c) and c not in _PROSE)


def test_the_readme_shows_commands_to_run() -> None:
    assert "reverie run examples/suite.jsonl -j 4 --report" in _commands()


@pytest.mark.slow
def test_every_readme_command_runs_as_written(isolated_env: Path, tmp_path: Path) -> None:
    script = Path(sys.executable).with_name("reverie")
    if not script.exists():
        pytest.skip("the reverie script is installed with the package (pip install -e .)")
    shutil.copytree(ROOT / "examples", tmp_path / "examples")
    env = {**os.environ, "PATH": f"{script.parent}{os.pathsep}{os.environ.get('PATH', '')}"}
    subprocess.run(["reverie", "chat", "-p", "hello"], cwd=tmp_path, env=env, check=True, capture_output=True)
    for command in _commands():
        shutil.rmtree(tmp_path / "runs", ignore_errors=True)  # the README's two runs share runs/suite
        words = shlex.split(command)
        stdin = "" if "--input-format" not in words else '{"type": "user", "text": "hi"}\n'
        result = subprocess.run(words, cwd=tmp_path, env=env, capture_output=True, text=True, input=stdin, timeout=600)
        assert result.returncode == 0 and "Traceback" not in result.stderr, (command, result.stderr[-2000:])

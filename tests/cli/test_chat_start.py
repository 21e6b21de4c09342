"""The typer-free parser of a headless ``chat`` (cli/chat_start.py) agrees with typer on every
command line it accepts, declines the rest (typer then parses, so help and errors are typer's), and
``chat -p`` through it imports neither typer nor pydantic."""

from __future__ import annotations

import dataclasses
import os
import subprocess
import sys
from pathlib import Path

import pytest
import typer

from orchestrator.cli.app import build_app
from orchestrator.cli.chat_start import parse_chat_args

_ACCEPTED = [
    ["-p", "hello"],
    ["--prompt", "hello"],
    ["--prompt=hello", "--new"],
    ["--prompt=", "--verbose"],
    ["-p", "a", "-p", "b"],
    ["-p", "hi", "-a", "bob", "-c", "c1", "--context-window", "4096", "-m", "gpt", "--output-format", "json"],
    ["--agent=alice", "--conversation=x", "--model=m", "-p", "hi", "--output-format", "stream-json"],
    ["--input-format", "stream-json"],
    ["--input-format=stream-json", "--output-format=text", "--new"],
    ["-p", "hi", "--output-format", "xml"],
    ["-p", "hi", "--input-format", "stream-json"],
    ["-p", "x y z", "--context-window=256"],
]
_DECLINED = [
    [],
    ["--new"],
    ["--help"],
    ["-p", "hi", "--help"],
    ["-p"],
    ["-p", "--new"],
    ["-phello"],
    ["-p", "hi", "extra"],
    ["-p", "hi", "--"],
    ["-p", "hi", "--context-window", "255"],
    ["-p", "hi", "--context-window", "1e3"],
    ["-p", "hi", "--unknown"],
    ["-p", "hi", "--new=1"],
    ["-p", "hi", "-V"],
]


def _typer_params(argv: list[str], env: dict[str, str]) -> dict[str, object]:
    group = typer.main.get_command(build_app("chat"))
    parent = group.make_context("reverie", ["chat"], resilient_parsing=True)
    command = group.get_command(parent, "chat")  # type: ignore[attr-defined]
    old = dict(os.environ)
    os.environ.clear()
    os.environ.update(env)
    try:
        return dict(command.make_context("chat", list(argv), parent=parent).params)
    finally:
        os.environ.clear()
        os.environ.update(old)


@pytest.mark.parametrize("env", [{}, {"REVERIE_AGENT": "from-env"}, {"REVERIE_AGENT": ""}])
@pytest.mark.parametrize("argv", _ACCEPTED, ids=" ".join)
def test_accepted_lines_parse_as_typer_parses_them(argv: list[str], env: dict[str, str]) -> None:
    parsed = parse_chat_args(argv, env)
    assert parsed is not None
    assert dataclasses.asdict(parsed) == _typer_params(argv, env)


@pytest.mark.parametrize("argv", _DECLINED, ids=lambda a: " ".join(a) or "(none)")
def test_other_lines_are_left_to_typer(argv: list[str]) -> None:
    assert parse_chat_args(argv, {}) is None


def test_headless_chat_imports_no_typer(tmp_path: Path) -> None:
    proc = subprocess.run(
        [sys.executable, "-X", "importtime", "-m", "orchestrator", "chat", "-p", "hello"],
        capture_output=True,
        text=True,
        env=dict(os.environ, REVERIE_HOME=str(tmp_path)),
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "I heard: hello" in proc.stdout
    names = {line.rsplit("|", 1)[1].strip() for line in proc.stderr.splitlines() if line.startswith("import time:")}
    assert not {n for n in names if n.split(".")[0] in {"typer", "pydantic", "click"}}


def test_errors_on_both_paths_are_one_line(tmp_path: Path) -> None:
    env = dict(os.environ, REVERIE_HOME=str(tmp_path))
    fast = subprocess.run(
        [sys.executable, "-m", "orchestrator", "chat", "-p", "hi", "--output-format", "xml"],
        capture_output=True, text=True, env=env, timeout=120,
    )
    assert fast.returncode == 1
    assert fast.stderr == "reverie: error: --output-format 'xml': use text, json or stream-json\n"
    slow = subprocess.run(
        [sys.executable, "-m", "orchestrator", "chat", "-p", "hi", "--context-window", "10"],
        capture_output=True, text=True, env=env, timeout=120,
    )
    assert slow.returncode == 2 and "--context-window" in slow.stderr

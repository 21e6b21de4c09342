"""chat has one parser (cli/chat_start.py's ``parse_chat_args`` over ``CHAT_OPTIONS``): it reads
every command line as click would, refuses the rest in click's words, is what typer's chat command
parses with too, and typer only renders the help, built from the same table; ``chat -p`` through it
imports neither typer nor pydantic."""

from __future__ import annotations

import dataclasses
import os
import subprocess
import sys
from pathlib import Path

import pytest
import typer

from orchestrator.cli.app import build_app, main
from orchestrator.cli.chat_start import CHAT_OPTIONS, ChatArgs, ChatUsageError, parse_chat_args

_ACCEPTED: list[tuple[list[str], dict[str, object]]] = [
    (["-p", "hello"], {"prompt": "hello"}),
    (["--prompt", "hello"], {"prompt": "hello"}),
    (["--prompt=hello", "--new"], {"prompt": "hello", "new": True}),
    (["--prompt=", "--verbose"], {"prompt": "", "verbose": True}),
    (["-p", "a", "-p", "b"], {"prompt": "b"}),
    (
        ["-p", "hi", "-a", "bob", "-c", "c1", "--context-window", "4096", "-m", "gpt", "--output-format", "json"],
        {"prompt": "hi", "agent": "bob", "conversation": "c1", "context_window": 4096, "model": "gpt", "output_format": "json"},
    ),
    (
        ["--agent=alice", "--conversation=x", "--model=m", "-p", "hi", "--output-format", "stream-json"],
        {"agent": "alice", "conversation": "x", "model": "m", "prompt": "hi", "output_format": "stream-json"},
    ),
    (["--input-format", "stream-json"], {"input_format": "stream-json"}),
    (["--input-format=stream-json", "--output-format=text", "--new"], {"input_format": "stream-json", "output_format": "text", "new": True}),
    (["-p", "hi", "--output-format", "xml"], {"prompt": "hi", "output_format": "xml"}),
    (["-p", "x y z", "--context-window=256"], {"prompt": "x y z", "context_window": 256}),
    (["-phello"], {"prompt": "hello"}),
    (["-p", "--new"], {"prompt": "--new"}),
    (["-p", "-"], {"prompt": "-"}),
    (["-p", "hi", "--"], {"prompt": "hi"}),
    ([], {}),
    (["--new", "-c", "c2"], {"new": True, "conversation": "c2"}),
]
_REFUSED = [
    (["-p"], "Option '-p' requires an argument"),
    (["-p", "hi", "extra"], "Got unexpected extra argument (extra)"),
    (["-p", "hi", "--", "a", "b"], "Got unexpected extra arguments (a b)"),
    (["-p", "hi", "--context-window", "255"], "Invalid value for '--context-window': must be at least 256"),
    (["-p", "hi", "--context-window", "1e3"], "Invalid value for '--context-window': Input should be a valid integer"),
    (["-p", "hi", "--unknown"], "No such option: --unknown"),
    (["-p", "hi", "--new=1"], "Option '--new' does not take a value"),
    (["-p", "hi", "-V"], "No such option: -V"),
]


@pytest.mark.parametrize("env", [{}, {"REVERIE_AGENT": "from-env"}, {"REVERIE_AGENT": ""}])
@pytest.mark.parametrize(("argv", "expected"), _ACCEPTED, ids=[" ".join(a) or "(none)" for a, _ in _ACCEPTED])
def test_accepted_lines(argv: list[str], expected: dict[str, object], env: dict[str, str]) -> None:
    agent = {"agent": env["REVERIE_AGENT"]} if env.get("REVERIE_AGENT") else {}
    assert parse_chat_args(argv, env) == ChatArgs(**{**agent, **expected})  # type: ignore[arg-type]


@pytest.mark.parametrize(("argv", "says"), _REFUSED, ids=[" ".join(a) for a, _ in _REFUSED])
def test_refused_lines_say_why_in_clicks_words(argv: list[str], says: str) -> None:
    with pytest.raises(ChatUsageError) as refused:
        parse_chat_args(argv, {})
    assert str(refused.value).startswith(says)


@pytest.mark.parametrize("argv", [["--help"], ["-p", "hi", "--help"]])
def test_help_is_typers_rendering_of_the_one_table(argv: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    assert parse_chat_args(argv, {}) is None
    main(["chat", *argv])
    shown = " ".join(capsys.readouterr().out.split())
    for option in CHAT_OPTIONS:
        assert all(spelling in shown for spelling in option.spellings), option
        assert option.help.split()[0] in shown, option


def test_typers_chat_command_parses_with_the_same_function() -> None:
    group = typer.main.get_command(build_app("chat"))
    parent = group.make_context("reverie", ["chat"], resilient_parsing=True)
    command = group.get_command(parent, "chat")  # type: ignore[attr-defined]
    argv = ["-phello", "--context-window=300", "-a", "ann"]
    assert command.make_context("chat", list(argv), parent=parent).params == dataclasses.asdict(parse_chat_args(argv))
    with pytest.raises(ChatUsageError):
        command.make_context("chat", ["-p", "hi", "--context-window", "3"], parent=parent)


def test_a_refused_line_is_one_line_with_status_2(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exited:
        main(["chat", "-p", "hi", "--bogus"])
    assert exited.value.code == 2
    assert capsys.readouterr().err == "reverie: error: No such option: --bogus (see reverie chat --help)\n"


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


def test_errors_are_one_line(tmp_path: Path) -> None:
    env = dict(os.environ, REVERIE_HOME=str(tmp_path))
    bad_value = subprocess.run(
        [sys.executable, "-m", "orchestrator", "chat", "-p", "hi", "--output-format", "xml"],
        capture_output=True, text=True, env=env, timeout=120,
    )
    assert bad_value.returncode == 1
    assert bad_value.stderr == "reverie: error: --output-format 'xml': use text, json or stream-json\n"
    bad_line = subprocess.run(
        [sys.executable, "-m", "orchestrator", "chat", "-p", "hi", "--context-window", "10"],
        capture_output=True, text=True, env=env, timeout=120,
    )
    assert bad_line.returncode == 2
    assert bad_line.stderr == (
        "reverie: error: Invalid value for '--context-window': must be at least 256 (see reverie chat --help)\n"
    )

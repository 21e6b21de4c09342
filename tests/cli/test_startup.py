"""Fast start (P1): a command imports only its own module, help stays complete, and a
command module that cannot be imported keeps its commands (listed, and failing in one line)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import typer
from typer.testing import CliRunner

from orchestrator.cli.app import COMMANDS, GROUPS, build_app


def _imported(*args: str, home: Path) -> tuple[subprocess.CompletedProcess[str], set[str]]:
    proc = subprocess.run(
        [sys.executable, "-X", "importtime", "-m", "orchestrator", *args],
        capture_output=True,
        text=True,
        env=dict(os.environ, REVERIE_HOME=str(home)),
        timeout=120,
    )
    names = {
        line.rsplit("|", 1)[1].strip()
        for line in proc.stderr.splitlines()
        if line.startswith("import time:") and "|" in line
    }
    return proc, names


def test_version_imports_nothing_of_the_cli(tmp_path: Path) -> None:
    proc, names = _imported("--version", home=tmp_path)
    assert proc.returncode == 0 and proc.stdout.startswith("reverie ")
    # cli/collector.py is the console script's own (it imports gc only)
    ours = {"orchestrator.cli", "orchestrator.cli.app", "orchestrator.cli.collector"}
    assert not {n for n in names if n.startswith(("typer", "orchestrator.", "anyio", "trio")) and n not in ours}


def test_chat_one_shot_imports_only_what_chat_needs(tmp_path: Path) -> None:
    proc, names = _imported("chat", "-p", "hello", home=tmp_path)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "I heard: hello" in proc.stdout
    for heavy in (
        "orchestrator.cli.memory",
        "orchestrator.cli.stress",
        "orchestrator.cli.batch",
        "orchestrator.batch",
        "orchestrator.app.stress",
        "rich.markdown",
        "typer.rich_utils",
        "openai",
    ):
        assert heavy not in names, heavy


def test_help_lists_every_command(tmp_path: Path) -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "orchestrator", "--help"],
        capture_output=True,
        text=True,
        env=dict(os.environ, REVERIE_HOME=str(tmp_path), COLUMNS="200"),
        timeout=120,
    )
    assert proc.returncode == 0
    listed = {line.strip("│ ").split()[0] for line in proc.stdout.splitlines() if line.startswith("│ ") and line.strip("│ ")}
    assert set(COMMANDS) | set(GROUPS) <= listed, proc.stdout


def test_the_table_names_exactly_what_each_module_registers() -> None:
    """The fast path trusts ``COMMANDS``: a module registering a command the table does not name
    would make that command reachable only through the slow path."""
    import importlib

    for module in set(COMMANDS.values()):
        app = typer.Typer()
        importlib.import_module(module).register(app)
        registered = {info.name for info in app.registered_commands} | {g.name for g in app.registered_groups}
        assert registered == {name for name, home in COMMANDS.items() if home == module}, module


def test_a_command_module_that_fails_to_import_keeps_its_commands(tmp_path: Path) -> None:
    script = """
import sys
class Broken:
    def find_spec(self, name, path=None, target=None):
        if name == "orchestrator.cli.stress":
            raise ImportError("libfoo.so: cannot open shared object file")
        return None
sys.meta_path.insert(0, Broken())
from orchestrator.cli.app import main
main(sys.argv[1:])
"""
    env = dict(os.environ, REVERIE_HOME=str(tmp_path), COLUMNS="200")
    helped = subprocess.run([sys.executable, "-c", script, "--help"], capture_output=True, text=True, env=env, timeout=120)
    assert helped.returncode == 0
    assert "stress" in helped.stdout and "unavailable" in helped.stdout
    assert "chat" in helped.stdout
    ran = subprocess.run(
        [sys.executable, "-c", script, "stress", "--writers", "2"], capture_output=True, text=True, env=env, timeout=120
    )
    assert ran.returncode == 1
    assert "Traceback" not in ran.stderr
    lines = [line for line in ran.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and "`stress` command is unavailable" in lines[0] and "libfoo.so" in lines[0], ran.stderr


def test_version_option_is_in_the_app() -> None:
    result = CliRunner().invoke(build_app(), ["--version"])
    assert result.exit_code == 0 and result.output.startswith("reverie ")

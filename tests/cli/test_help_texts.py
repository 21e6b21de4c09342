"""Help texts say what a user needs: no internal decision ids (D2, S23, ...) that do not ship with
reverie, and no reST markup (````--resume````, ``:func:``) shown raw."""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from orchestrator.cli.app import COMMANDS, GROUPS, build_app

_INTERNAL = re.compile(r"\b([MTRCSDAPO]\d{1,2}|(?:MEMFS|TURN|COMPACTION)-R?\d[\d.]*)\b|``|:func:|:class:|\bissue \d+")
_SUBCOMMANDS = {"memory": ["init", "path", "validate", "install-hook", "tree"], "reflections": ["list", "show", "merge", "discard"]}


def _pages() -> list[list[str]]:
    pages = [[]]
    for name in [*COMMANDS, *GROUPS]:
        pages.append([name])
        pages += [[name, sub] for sub in _SUBCOMMANDS.get(name, [])]
    return pages


@pytest.mark.parametrize("words", _pages(), ids=lambda w: " ".join(w) or "reverie")
def test_help_has_no_internal_ids_or_markup(words: list[str]) -> None:
    result = CliRunner().invoke(build_app(words[0] if words else None), [*words, "--help"], terminal_width=200)
    assert result.exit_code == 0, result.output
    found = [line.strip() for line in result.output.splitlines() if _INTERNAL.search(line)]
    assert not found, found


def test_shell_completion_installs_with_typers_own_option(tmp_path: Path) -> None:
    # a process of its own, as a user's shell runs it: typer reads the completion variables from
    # the environment, which other tests in this process may have set
    # typer (with shellingham) detects the shell from the parent process: run reverie from bash, as a
    # user's shell would (`; true` keeps bash from replacing itself with the command)
    result = subprocess.run(
        ["bash", "-c", f"{shlex.quote(sys.executable)} -m orchestrator --show-completion; true"],
        capture_output=True, text=True, timeout=120,
        env={k: v for k, v in os.environ.items() if "COMPLETE" not in k} | {"REVERIE_HOME": str(tmp_path)},
    )
    assert result.returncode == 0 and "_reverie_completion" in result.stdout, result.stderr

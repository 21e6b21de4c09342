"""How many git processes a chat turn starts (P2: at most 3 for a turn that does not
edit memory, none asked twice), counted with a logging ``git`` first on ``PATH``; reverie runs as
it always does, in its own process."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest


def _shim(folder: Path, log: Path) -> dict[str, str]:
    """An environment whose ``git`` logs its arguments (one line per process) and runs the real one."""
    real = shutil.which("git")
    assert real is not None
    folder.mkdir()
    script = folder / "git"
    script.write_text(f'#!/bin/sh\nprintf "%s\\n" "$*" >> "{log}"\nexec "{real}" "$@"\n', encoding="utf-8")
    script.chmod(0o755)
    return dict(os.environ, PATH=f"{folder}{os.pathsep}{os.environ.get('PATH', '')}")


def _chat(env: dict[str, str], text: str) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "orchestrator", "chat", "-p", text],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr


def _logged(log: Path) -> list[str]:
    return log.read_text(encoding="utf-8").splitlines() if log.exists() else []


@pytest.fixture
def env(tmp_path: Path) -> dict[str, str]:
    shimmed = _shim(tmp_path / "bin", tmp_path / "git.log")
    shimmed["REVERIE_HOME"] = str(tmp_path / "home")
    return shimmed


def test_the_shim_sees_the_first_turn_create_the_memory_repository(env: dict[str, str], tmp_path: Path) -> None:
    _chat(env, "hello")
    logged = _logged(tmp_path / "git.log")
    assert any(line.startswith("init") for line in logged), logged
    assert any("commit" in line.split() for line in logged), logged


def test_a_chat_turn_that_does_not_edit_memory_starts_at_most_three_git_processes(
    env: dict[str, str], tmp_path: Path
) -> None:
    log = tmp_path / "git.log"
    _chat(env, "hello")
    for text in ("how are you", "tell me more"):
        log.unlink(missing_ok=True)
        _chat(env, text)
        logged = _logged(log)
        assert len(logged) <= 3, logged
        assert len(set(logged)) == len(logged), f"a question asked twice: {logged}"

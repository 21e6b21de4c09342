"""kill -9 of a `reverie chat` process in the middle of a reflection merge, then a restart."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest


def _reverie(home: Path, *args: str, fault: str | None = None) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ, REVERIE_HOME=str(home), REVERIE_WORKTREES=str(home / "worktrees"))
    env.pop("REVERIE_FAULT", None)
    if fault:
        env["REVERIE_FAULT"] = fault
    return subprocess.run(
        [sys.executable, "-m", "orchestrator", *args], capture_output=True, text=True, env=env, timeout=120
    )


def _git(repo: Path, *args: str) -> str:
    return subprocess.run(["git", "-C", str(repo), *args], capture_output=True, text=True, check=True).stdout


@pytest.mark.parametrize("step", ["locked", "after-ff"])
def test_kill_during_merge_then_restart_loses_nothing(tmp_path: Path, step: str) -> None:
    home = tmp_path / "home"
    home.mkdir()
    (home / "config.toml").write_text('[reflection]\ntrigger = "step-count"\nstep_count = 1\n')
    crashed = _reverie(home, "chat", "-p", "my name is Ada Lovelace", fault=step)
    assert crashed.returncode == -9, crashed.stderr
    assert "waiting up to 30 s for 1 background subagent" in crashed.stderr, "S23's progress line"
    memory = home / "agents" / "agent-default" / "memory"
    assert "(reflection)" in _git(memory, "log", "--all", "--format=%s"), "the reflection committed before the kill"

    again = _reverie(home, "chat", "-p", "hello")
    assert again.returncode == 0, again.stderr
    _git(memory, "fsck", "--no-dangling")
    assert _git(memory, "status", "--porcelain") == ""
    worktrees = _git(memory, "worktree", "list", "--porcelain")
    assert worktrees.count("worktree ") == 1, worktrees
    reachable = _git(memory, "log", "--all", "--format=%s")
    assert "(reflection)" in reachable
    # the restart recovered the interrupted run and retried its merge once the checkout was clean
    assert "Ada Lovelace" in (memory / "human.md").read_text()
    assert _git(memory, "branch", "--list", "reverie/reflection/*") == ""
    assert _reverie(home, "memory", "validate", "--head").returncode == 0
    listing = _reverie(home, "reflections", "list")
    assert listing.returncode == 0, listing.stderr

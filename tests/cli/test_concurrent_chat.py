"""D1 across processes: four ``reverie chat -p`` on one agent, each saving a different fact
through the agent's own ``git commit`` (the wrapper takes the repository lock), all committed.

All four talk to the agent's one conversation: the supervisor's per-conversation ``flock`` makes
the processes take turns instead of interleaving their messages."""

from __future__ import annotations

import os
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest


def _git(repo: Path, *args: str) -> str:
    return subprocess.run(["git", "-C", str(repo), *args], capture_output=True, text=True, check=True).stdout


@pytest.mark.slow
def test_four_concurrent_one_shot_chats_commit_all_four_facts(tmp_path: Path) -> None:
    home = tmp_path / "home"
    home.mkdir()
    env = dict(os.environ, REVERIE_HOME=str(home), REVERIE_WORKTREES=str(home / "worktrees"), REVERIE_SCRIPTED_LATENCY="0.3")
    env.pop("REVERIE_FAULT", None)
    first = subprocess.run(
        [sys.executable, "-m", "orchestrator", "chat", "-p", "hello"], env=env, capture_output=True, text=True, timeout=120
    )
    assert first.returncode == 0, first.stderr
    facts = [f"remember: my favourite number is {n}{n}{n}" for n in range(4)]
    procs = [
        subprocess.Popen(
            [sys.executable, "-m", "orchestrator", "chat", "-p", fact],
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for fact in facts
    ]
    outputs = [p.communicate(timeout=240) for p in procs]
    for proc, (out, err) in zip(procs, outputs, strict=True):
        assert proc.returncode == 0, err
        assert "could not" not in out.lower(), out
    memory = home / "agents" / "agent-default" / "memory"
    human = _git(memory, "show", "HEAD:human.md")
    for n in range(4):
        assert f"my favourite number is {n}{n}{n}" in human
    # A process whose line an earlier commit already took along commits nothing more.
    subjects = _git(memory, "log", "--format=%s").splitlines()
    assert 1 <= subjects.count("feat: update human") <= 4
    assert _git(memory, "status", "--porcelain") == ""
    assert _turns_never_interleave(home / "reverie.sqlite3")


def _turns_never_interleave(store: Path) -> bool:
    """Each turn's messages are contiguous in the one conversation's transcript (turns took turns)."""
    with sqlite3.connect(store) as db:
        rows = db.execute("SELECT conversation_id, turn_id FROM messages ORDER BY seq").fetchall()
    assert len({conversation for conversation, _ in rows}) == 1
    runs = [turn for i, (_, turn) in enumerate(rows) if i == 0 or rows[i - 1][1] != turn]
    return len(runs) == len(set(runs))

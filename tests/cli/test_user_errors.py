"""A demanding user's mistakes through the real CLI: each ends with one clear line, never a traceback,
and never leaves anything behind that the user did not ask for."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest


def reverie(home: Path, *args: str, stdin: str | None = None, **env: str) -> subprocess.CompletedProcess[str]:
    full_env = dict(os.environ, REVERIE_HOME=str(home), **env)
    return subprocess.run(
        [sys.executable, "-m", "orchestrator", *args],
        capture_output=True,
        text=True,
        env=full_env,
        input=stdin,
        timeout=120,
    )


def one_line_error(proc: subprocess.CompletedProcess[str], *needles: str) -> str:
    """The single ``reverie: error:`` line, after checking there is no traceback."""
    assert proc.returncode != 0, proc.stdout
    assert "Traceback" not in proc.stderr, proc.stderr
    lines = [line for line in proc.stderr.splitlines() if line.strip()]
    assert len(lines) == 1, proc.stderr
    assert lines[0].startswith("reverie: error: "), proc.stderr
    for needle in needles:
        assert needle in lines[0], lines[0]
    return lines[0]


@pytest.fixture
def home(tmp_path: Path) -> Path:
    path = tmp_path / "home"
    path.mkdir()
    return path


def test_read_only_commands_never_create_an_agent(home: Path) -> None:
    for args in (("history", "-a", "typo"), ("search", "x", "-a", "typo"), ("prompt", "-a", "typo")):
        one_line_error(reverie(home, *args), "no agent 'typo'")
    assert not (home / "agents").exists()


def test_history_of_an_agent_without_conversations_creates_none(home: Path) -> None:
    assert reverie(home, "memory", "init", "-a", "bare").returncode == 0
    shown = reverie(home, "history", "-a", "bare")
    assert shown.returncode == 0 and "no messages yet" in shown.stderr
    listed = reverie(home, "history", "--list", "-a", "bare")
    assert listed.returncode == 0 and listed.stdout == ""


def test_empty_prompt_is_refused(home: Path) -> None:
    one_line_error(reverie(home, "chat", "-p", "  "), "--prompt is empty")


def test_ctrl_c_in_the_repl_exits_130_and_keeps_history(home: Path) -> None:
    proc = subprocess.Popen(
        [sys.executable, "-m", "orchestrator", "chat"],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=dict(os.environ, REVERIE_HOME=str(home)),
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    )
    assert proc.stdin is not None and proc.stdout is not None
    proc.stdin.write("hello there\n")
    proc.stdin.flush()
    deadline = time.monotonic() + 60
    seen = ""
    while "I heard: hello there" not in seen and time.monotonic() < deadline:
        seen += proc.stdout.readline()
    proc.send_signal(signal.SIGINT)
    out, err = proc.communicate(timeout=30)
    assert proc.returncode == 130, err
    assert "Traceback" not in err, err
    assert "hello there" in (home / "history" / "agent-default.txt").read_text(encoding="utf-8")
    history = reverie(home, "history")
    assert "hello there" in history.stdout


def test_malformed_config_is_one_line_naming_file_and_key(home: Path) -> None:
    (home / "config.toml").write_text('[turn]\nmax_steps = "lots"\n', encoding="utf-8")
    one_line_error(reverie(home, "chat", "-p", "hi"), "config.toml: turn.max_steps = 'lots'")


def _git(repo: Path, *args: str) -> str:
    return subprocess.run(["git", "-C", str(repo), *args], capture_output=True, text=True, check=False).stdout


def test_a_memory_repo_mid_rebase_is_named_and_never_advised_on(home: Path) -> None:
    """A rebase reverie did not start is named, never advised on (its todo could run anything: see
    memfs.operations), and the next turn removes it with a warning; no commit or branch moves."""
    assert reverie(home, "chat", "-p", "hi").returncode == 0
    memory = home / "agents" / "agent-default" / "memory"
    _git(memory, "checkout", "-q", "-b", "side")
    with (memory / "human.md").open("a") as f:
        f.write("- side\n")
    _git(memory, "commit", "-qam", "feat: side")
    _git(memory, "checkout", "-q", "main")
    with (memory / "human.md").open("a") as f:
        f.write("- main\n")
    _git(memory, "commit", "-qam", "feat: main")
    main_tip = _git(memory, "rev-parse", "main").strip()
    _git(memory, "rebase", "side")
    assert (memory / ".git" / "rebase-merge").exists()

    validate = reverie(home, "memory", "validate")
    one_line_error(validate, "rebase in progress that reverie did not start (.git/rebase-merge) (unmerged: human.md)")
    assert "--continue" not in validate.stderr and "--abort" not in validate.stderr
    _git(memory, "branch", "reverie/reflection/20260101T000000Z-bbbbbbbb", main_tip)
    merge = reverie(home, "reflections", "merge", "20260101T000000Z-bbbbbbbb")
    one_line_error(merge, "rebase in progress", "the branch is kept")
    chat = reverie(home, "chat", "-p", "hello")
    assert chat.returncode == 0, chat.stderr
    assert "removed an operation in progress that reverie did not start (.git/rebase-merge)" in chat.stderr
    assert "⚠ memory repository has a rebase or merge stopped half-way (details: `reverie memory validate`)" in chat.stderr, "activity goes to stderr"
    tree = reverie(home, "memory", "tree")
    assert tree.returncode == 0 and "reverie: warning:" in tree.stderr and "unmerged: human.md" in tree.stderr
    assert "--continue" not in tree.stderr + chat.stderr and "--abort" not in tree.stderr + chat.stderr

    assert not (memory / ".git" / "rebase-merge").exists()
    assert _git(memory, "rev-parse", "main").strip() == main_tip
    assert _git(memory, "rev-parse", "--verify", "-q", "reverie/reflection/20260101T000000Z-bbbbbbbb").strip() == main_tip


def test_memory_commands_refuse_a_directory_that_is_not_a_repository(home: Path, tmp_path: Path) -> None:
    plain = tmp_path / "plain"
    plain.mkdir()
    one_line_error(reverie(home, "memory", "validate", str(plain)), "not a readable git repository")
    one_line_error(reverie(home, "memory", "tree", str(plain)), "not a readable git repository")


def test_search_refuses_an_empty_query_and_prints_one_line_per_hit(home: Path) -> None:
    assert reverie(home, "chat", "-p", "hello world").returncode == 0
    one_line_error(reverie(home, "search", " "), "the search query is empty")
    found = reverie(home, "search", "hello")
    assert found.returncode == 0 and len(found.stdout.splitlines()) == 2, found.stdout


def test_reflect_says_when_nothing_was_started_instead_of_an_old_status(home: Path) -> None:
    assert reverie(home, "chat", "-p", "remember that I like tea").returncode == 0
    first = reverie(home, "reflect")
    assert first.returncode == 0 and first.stdout.strip() == "reflection: no_changes", first.stdout
    again = reverie(home, "reflect")
    assert again.stdout.strip() == "reflection: not started: nothing to reflect on", again.stdout


def test_a_damaged_store_is_one_line_naming_it(home: Path) -> None:
    (home / "reverie.sqlite3").write_bytes(b"this is not a database, it is garbage" * 100)
    one_line_error(reverie(home, "chat", "-p", "hi"), "conversation store", "reverie.sqlite3", "not a database")


def test_model_without_an_endpoint_is_flagged(home: Path) -> None:
    chat = reverie(home, "chat", "-p", "hi", "--model", "gpt-9")
    assert chat.returncode == 0 and "--model gpt-9 has no effect without an endpoint" in chat.stderr

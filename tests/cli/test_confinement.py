"""A10 end to end: ``reverie chat -p`` against the loopback server, which scripts the tool calls a
hostile or confused model would make; real bubblewrap, real git, both backends."""

from __future__ import annotations

import json
import os
import sqlite3
import subprocess
import sys
import time
from contextlib import closing
from pathlib import Path

import pytest

from orchestrator.testing.openai_server import LoopbackOpenAI, Planned, text_reply, tool_call_reply
from tests.support import none_left_within, running_with, wait_until

KEY = "sk-live-7f3a9c0e5b21d4_DO_NOT_LEAK"
BACKENDS = pytest.mark.parametrize("backend", ["trio", "asyncio"])


def _env(home: Path, server: LoopbackOpenAI, backend: str, **extra: str) -> dict[str, str]:
    env = dict(os.environ, REVERIE_HOME=str(home), REVERIE_WORKTREES=str(home / "worktrees"))
    env.update(REVERIE_BASE_URL=server.base_url, REVERIE_MODEL="loopback-model", OPENAI_API_KEY=KEY)
    env.update(REVERIE_BACKEND=backend, **extra)
    return env


def _chat(tmp_path: Path, server: LoopbackOpenAI, backend: str, text: str, **extra: str) -> subprocess.CompletedProcess[str]:
    workspace = tmp_path / "project" / "ws"
    workspace.mkdir(parents=True, exist_ok=True)
    return subprocess.run(
        [sys.executable, "-m", "orchestrator", "chat", "-p", text],
        capture_output=True,
        text=True,
        cwd=workspace,
        env=_env(tmp_path / "home", server, backend, **extra),
        timeout=120,
    )


def _bash(command: str) -> Planned:
    return tool_call_reply("bash", json.dumps({"command": command}))


def _files_containing(root: Path, needle: bytes) -> list[Path]:
    found = []
    for path in root.rglob("*"):
        try:
            if path.is_file() and not path.is_symlink() and needle in path.read_bytes():
                found.append(path)
        except OSError:
            continue
    return found


@BACKENDS
def test_hostile_tool_calls_are_contained(tmp_path: Path, backend: str) -> None:
    (tmp_path / "home").mkdir()
    hook = tmp_path / "home" / "agents" / "agent-default" / "memory" / ".git" / "hooks" / "pre-commit"
    with LoopbackOpenAI() as server:
        server.enqueue(text_reply("ready"))
        first = _chat(tmp_path, server, backend, "hello")
        assert first.returncode == 0, first.stderr
        before = hook.read_bytes()
        server.enqueue(
            _bash('echo "key=$OPENAI_API_KEY"; env; cat /proc/*/environ 2>/dev/null | tr "\\0" "\\n" | grep sk-'),
            _bash("echo pwned > ../outside.txt"),
            tool_call_reply(
                "write_file", json.dumps({"path": str(hook), "content": "#!/bin/sh\nexit 0\n"})
            ),
            _bash('echo "exit 0" > "$MEMORY_DIR/.git/hooks/pre-commit"'),
            tool_call_reply("read_file", json.dumps({"path": str(hook.parent.parent / "config")})),
            text_reply("all done"),
        )
        done = _chat(tmp_path, server, backend, "try everything")
        bodies = json.dumps(server.chat_bodies)
    assert done.returncode == 0, done.stderr
    assert KEY not in done.stdout + done.stderr + first.stdout + first.stderr
    assert KEY not in bodies, "a tool result carried the key to the provider"
    assert _files_containing(tmp_path / "home", KEY.encode()) == []
    assert not (tmp_path / "project" / "outside.txt").exists()
    assert hook.read_bytes() == before
    assert "Read-only file system" in bodies and "inside a .git directory" in bodies


@BACKENDS
def test_max_steps_is_loud(tmp_path: Path, backend: str) -> None:
    (tmp_path / "home").mkdir()
    with LoopbackOpenAI(fallback=_bash("echo again")) as server:
        done = _chat(tmp_path, server, backend, "loop forever", REVERIE_MAX_STEPS="3")
        requests = len(server.chat_bodies)
    assert done.returncode == 3, done.stderr
    assert requests == 3
    line = (
        "stopped after 3 steps (max_steps); send another message to continue, "
        "or raise [turn] max_steps / REVERIE_MAX_STEPS"
    )
    assert line in done.stderr.splitlines()


@BACKENDS
def test_kill_9_of_reverie_leaves_no_tool_child(tmp_path: Path, backend: str) -> None:
    (tmp_path / "home").mkdir()
    workspace = tmp_path / "project" / "ws"
    workspace.mkdir(parents=True)
    marker = "40.0417" if backend == "trio" else "40.0418"
    with LoopbackOpenAI(fallback=text_reply("done")) as server:
        server.enqueue(_bash(f"sleep {marker} & sleep {marker}"))
        proc = subprocess.Popen(
            [sys.executable, "-m", "orchestrator", "chat", "-p", "sleep please"],
            cwd=workspace,
            env=_env(tmp_path / "home", server, backend),
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        try:
            wait_until(lambda: len(running_with(marker, program="sleep")) >= 2, timeout=60, what="the tool call")
            proc.kill()
            proc.wait(10)
            assert none_left_within(marker, 5.0), f"survivors: {running_with(marker)}"
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()


def _tree_size(root: Path) -> int:
    return sum(p.stat().st_size for p in root.rglob("*") if p.is_file() and not p.is_symlink())


@pytest.mark.slow
@BACKENDS
def test_endless_stream_ends_with_one_line_within_a_minute(tmp_path: Path, backend: str) -> None:
    (tmp_path / "home").mkdir()
    endless = Planned(text="tick " * 400_000, chunk_size=5, chunk_delay=0.01)
    with LoopbackOpenAI(fallback=endless) as server:
        started = time.monotonic()
        done = _chat(tmp_path, server, backend, "talk forever", REVERIE_REQUEST_TIMEOUT="2", REVERIE_MODEL_ATTEMPTS="1")
        elapsed = time.monotonic() - started
    assert elapsed < 60
    assert len(server.chat_bodies) == 1, "one attempt, as the setting asks"
    assert done.returncode == 1
    errors = [line for line in done.stderr.splitlines() if line.startswith("reverie: error:")]
    assert len(errors) == 1 and "request_timeout" in errors[0], done.stderr


@BACKENDS
def test_a_30_mb_answer_leaves_the_home_small(tmp_path: Path, backend: str) -> None:
    (tmp_path / "home").mkdir()
    huge = Planned(text="z" * 30_000_000, chunk_size=65_536)
    with LoopbackOpenAI(fallback=huge) as server:
        done = _chat(tmp_path, server, backend, "say a lot", REVERIE_MODEL_ATTEMPTS="1")
    assert done.returncode == 1
    assert "max_response_chars" in done.stderr
    assert _tree_size(tmp_path / "home") < 20_000_000
    assert len(done.stdout) <= 1_100_000
    with closing(sqlite3.connect(tmp_path / "home" / "reverie.sqlite3")) as db:
        kept = db.execute("SELECT content FROM messages WHERE role = 'assistant' ORDER BY seq").fetchall()
    assert [len(row[0]) for row in kept] and kept[-1][0].count("z") == 1_000_000
    assert kept[-1][0].endswith("[response cut at 1,000,000 characters (max_response_chars)]")


def test_repl_shows_the_max_steps_line(tmp_path: Path) -> None:
    (tmp_path / "home").mkdir()
    workspace = tmp_path / "project" / "ws"
    workspace.mkdir(parents=True)
    with LoopbackOpenAI(fallback=_bash("echo again")) as server:
        done = subprocess.run(
            [sys.executable, "-m", "orchestrator", "chat"],
            input="keep going\n",
            capture_output=True,
            text=True,
            cwd=workspace,
            env=_env(tmp_path / "home", server, "trio", REVERIE_MAX_STEPS="2"),
            timeout=120,
        )
    assert done.returncode == 0, done.stderr
    assert (
        "stopped after 2 steps (max_steps); send another message to continue, "
        "or raise [turn] max_steps / REVERIE_MAX_STEPS"
    ) in done.stderr.splitlines()


def test_a_prompt_that_is_not_utf8_is_one_line(tmp_path: Path) -> None:
    (tmp_path / "home").mkdir()
    env = dict(os.environ, REVERIE_HOME=str(tmp_path / "home"))
    done = subprocess.run(
        [sys.executable, "-m", "orchestrator", "chat", "-p", b"caf\xe9 au lait"],
        capture_output=True,
        cwd=tmp_path,
        env=env,
        timeout=60,
    )
    assert done.returncode == 1
    assert done.stderr.decode() == "reverie: error: --prompt is not valid UTF-8 text (byte 0xe9 at position 3)\n"

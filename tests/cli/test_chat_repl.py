"""The REPL while a turn runs, driven in tmux (``send-keys`` in, ``capture-pane`` out): the spinner
with elapsed time and tokens above the kept status line, text typed meanwhile staying in the input
line (never echoed into the transcript) and sent once the turn has ended. Every wait is on what the
screen shows, with a deadline that fails loudly."""

from __future__ import annotations

import os
import re
import shlex
import shutil
import subprocess
import sys
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from orchestrator.testing.openai_server import LoopbackOpenAI, Planned
from tests.support import wait_until

pytestmark = pytest.mark.skipif(shutil.which("tmux") is None, reason="tmux is not installed (apt-get install tmux)")

SPINNER = re.compile(r"[⠋⠙⠹⠸⠼⠴⠦⠧⠇⠏] \d+s · ↑[\d,]+ ↓[\d,]+ tokens")


class Tmux:
    """One tmux server of the test's own (its socket named after the test), one window."""

    def __init__(self, socket: str) -> None:
        self.socket = socket

    def run(self, *args: str) -> str:
        done = subprocess.run(["tmux", "-L", self.socket, *args], capture_output=True, text=True, timeout=30)
        return done.stdout

    def lines(self) -> list[str]:
        return [line.rstrip() for line in self.run("capture-pane", "-p", "-t", "chat").splitlines()]

    def wait(self, test: Callable[[list[str]], bool], what: str, timeout: float = 60.0) -> list[str]:
        seen: list[str] = []

        def shown() -> bool:
            seen[:] = self.lines()
            return test(seen)

        try:
            wait_until(shown, timeout=timeout, what=f"the screen showing {what}")
        except AssertionError as missed:
            raise AssertionError(f"{missed}:\n" + "\n".join(seen)) from None
        return seen

    def keys(self, *keys: str) -> None:
        self.run("send-keys", "-t", "chat", *keys)


@pytest.fixture
def tmux(tmp_path: Path) -> Iterator[Tmux]:
    server = Tmux(f"reverie-test-{os.getpid()}-{tmp_path.name}")
    yield server
    server.run("kill-server")


def _start_chat(tmux: Tmux, home: Path, server: LoopbackOpenAI) -> None:
    env = {
        "REVERIE_HOME": str(home), "TERM": "xterm-256color", "REVERIE_BASE_URL": server.base_url,
        "REVERIE_MODEL": "loopback-model", "OPENAI_API_KEY": "sk-test",
    }
    command = " ".join(f"{k}={shlex.quote(v)}" for k, v in env.items())
    command = f"env {command} {shlex.quote(sys.executable)} -m orchestrator chat"
    tmux.run("new-session", "-d", "-s", "chat", "-x", "140", "-y", "30", command)


class _HeldFirst:
    """The loopback model: the first call is held until ``release`` (the turn runs as long as the
    test needs to look at it, and no longer); every call answers ``I heard: <the user's text>``."""

    def __init__(self) -> None:
        self.release = threading.Event()
        self._first = threading.Lock()

    def __call__(self, body: Any) -> Planned:
        text = next(m["content"] for m in reversed(body["messages"]) if m.get("role") == "user")
        if self._first.acquire(blocking=False):
            self.release.wait(120)
        return Planned(text=f"I heard: {text}")


def test_a_running_turn_shows_a_spinner_keeps_the_status_line_and_the_typed_ahead_text(
    tmux: Tmux, tmp_path: Path
) -> None:
    model = _HeldFirst()
    with LoopbackOpenAI(fallback=model) as server:
        try:
            _start_chat(tmux, tmp_path / "home", server)
            tmux.wait(lambda ls: any(line.startswith("›") for line in ls) and "context " in ls[-1], "the prompt")
            tmux.keys("hello there", "Enter")
            during = tmux.wait(lambda ls: bool(SPINNER.search(ls[-1])), "the spinner")
            assert "context " in during[-1] and "agent-default" in during[-1], "the status line stays beside the spinner"
            tmux.keys("typed ahead")
            during = tmux.wait(lambda ls: "› typed ahead" in ls and bool(SPINNER.search(ls[-1])), "typed-ahead text while busy")
            frames = {SPINNER.search(during[-1]).group(0)[0]}  # type: ignore[union-attr]
            tmux.wait(lambda ls: (m := SPINNER.search(ls[-1])) is not None and m.group(0)[0] not in frames, "the spinner move")
            assert "I heard: hello there" not in tmux.lines(), "the turn was still held"
            model.release.set()
            after = tmux.wait(
                lambda ls: "I heard: hello there" in ls and not SPINNER.search(ls[-1]) and "context " in ls[-1],
                "the reply, then the spinner gone and the status line back",
            )
            reply = after.index("I heard: hello there")
            assert [line for line in after if "typed ahead" in line] == ["› typed ahead"], after
            assert after.index("› typed ahead") > reply, "the typed text waits in the input line below the reply"
            tmux.keys("Enter")
            tmux.wait(lambda ls: "I heard: typed ahead" in ls, "the typed-ahead text sent after the turn")
        finally:
            model.release.set()


def test_the_way_out_names_what_it_waits_for_and_how_to_leave_it() -> None:
    from orchestrator.cli.chat_repl import waiting_line
    from orchestrator.runtime.supervisor import Running

    one = [Running("reflection 20261208T012903Z-99419bd7", 12.4)]
    assert waiting_line(one) == (
        "waiting for reflection 20261208T012903Z-99419bd7 (12 s left; Ctrl-C to leave it for next time)"
    )
    two = [Running("compaction c-1", None), Running("reflection r-1", 3.0)]
    assert waiting_line(two) == "waiting for compaction c-1 and 1 more (no time limit; Ctrl-C to leave them for next time)"

"""The chat REPL driven in a real terminal (a pty with a terminal emulator, not a mocked stdin):
slash commands, Ctrl-C during a turn and at the prompt, leaving with a sane terminal, background
notices above the prompt, multi-line input, per-agent history. Both backends."""

from __future__ import annotations

import sqlite3
import sys
import threading
from pathlib import Path
from typing import Any

import pytest

from orchestrator.cli.chat_slash import COMMANDS
from orchestrator.testing.openai_server import LoopbackOpenAI, Planned
from tests.support import wait_until

from .terminal import Terminal

CHAT = f"{sys.executable} -m orchestrator chat"


@pytest.fixture(params=["trio", "asyncio"])
def backend(request: pytest.FixtureRequest) -> str:
    return str(request.param)


def _prompt_back(text: str) -> bool:
    lines = [line for line in text.splitlines() if line.strip()]
    return any(line.startswith("›") for line in lines[-3:])


def _idle(text: str) -> bool:
    """The prompt is up and no turn runs: the prompt stays up during a turn too, with the spinner's
    "Ctrl-C interrupts" in its toolbar, so the prompt alone does not say a turn has ended."""
    lines = [line for line in text.splitlines() if line.strip()]
    return _prompt_back(text) and bool(lines) and "Ctrl-C interrupts" not in lines[-1]


def _statuses(home: Path) -> list[str]:
    with sqlite3.connect(home / "reverie.sqlite3") as conn:
        return [row[0] for row in conn.execute("SELECT status FROM turns ORDER BY started_at, rowid")]


def _wait_statuses(home: Path, expected: list[str], what: str) -> None:
    """The store may commit a moment after the screen shows the prompt: wait for it."""
    wait_until(lambda: _statuses(home) == expected, timeout=60, what=what)


def test_help_interrupt_status_and_exit_leave_a_sane_terminal(tmp_path: Path, backend: str) -> None:
    home = tmp_path / "home"
    term = Terminal(home, REVERIE_SCRIPTED_LATENCY="600", REVERIE_BACKEND=backend)
    try:
        term.wait("$")
        term.line(CHAT)
        term.wait("/help for commands")
        term.wait(_prompt_back)
        term.line("/help")
        shown = term.wait("Ctrl-D or /exit leaves")
        for command in COMMANDS:
            assert command.usage in shown, command.usage

        term.line("tell me something slowly")
        _wait_statuses(home, ["running"], "the turn's start")
        term.interrupt()
        term.wait("interrupted")
        term.wait(_prompt_back)
        # the model call was cancelled, not waited for: no answer was ever stored or shown
        _wait_statuses(home, ["interrupted"], "the interrupted turn")
        assert "I heard" not in term.text()
        with sqlite3.connect(home / "reverie.sqlite3") as conn:
            assert conn.execute("SELECT COUNT(*) FROM messages WHERE role = 'assistant'").fetchone() == (0,)

        term.line("/status")
        status = term.wait("kept branches none")
        assert "agent-default" in status and "memory HEAD" in status and "/ 128000 tokens" in status

        term.line("/exit")
        term.wait(lambda text: text.rstrip().endswith("$"))
        term.line("stty -a; echo stty-$((1 + 1))")  # the marker is printed, not typed: the echo of a typed line never matches
        settings = term.wait("stty-2\n")
        words = settings.replace(";", " ").split()
        assert "echo" in words and "-echo" not in words and "icanon" in words
        assert (home / "history" / "agent-default.txt").read_text().count("tell me something slowly") == 1
    finally:
        term.close()


def test_a_background_reflection_notice_lands_above_the_prompt(tmp_path: Path, backend: str) -> None:
    home = tmp_path / "home"
    term = Terminal(home, REVERIE_SCRIPTED_LATENCY="0.5", REVERIE_BACKEND=backend)
    try:
        term.line(CHAT)
        term.wait(_prompt_back)
        term.line("I like green tea")
        term.wait("I heard: I like green tea")
        term.wait(_idle)
        term.line("/reflect")
        term.wait("reflection started")
        term.wait(_prompt_back)
        term.send("half a thought")
        term.wait("reflection merged 1 commit")
        term.pump(0.5)
        lines = [line for line in term.lines() if line.strip()]
        notice = next(i for i, line in enumerate(lines) if "reflection merged 1 commit" in line)
        assert "human.md +1 -0" in lines[notice]
        assert lines[notice + 1].strip() == "+ - I like green tea"
        assert lines[notice + 2] == "› half a thought", lines
        assert "reflection merged" not in lines[notice + 2]
        term.line("")
        term.wait("I heard: half a thought")
    finally:
        term.close()


def test_enter_during_a_turn_queues_the_entry_until_the_turn_ends(tmp_path: Path, backend: str) -> None:
    """The turn's model call is held by the loopback server until the screen shows the entry
    queued, so the turn is known to still run then (no latency long enough to hope it does)."""
    home = tmp_path / "home"
    held = threading.Event()
    release = threading.Event()

    def answer(body: Any) -> Planned:
        held.set()
        release.wait(120)
        return Planned(text="I heard: I like green tea")

    with LoopbackOpenAI(fallback=answer) as server:
        term = Terminal(
            home, REVERIE_BACKEND=backend, REVERIE_BASE_URL=server.base_url, REVERIE_MODEL="loopback-model",
            OPENAI_API_KEY="sk-test",
        )
        try:
            term.line(CHAT)
            term.wait(_prompt_back)
            term.line("I like green tea")
            term.wait("Ctrl-C interrupts")
            term.line("/reflections")
            queued = term.wait("⏎ queued")
            assert held.wait(60) and len(server.chat_bodies) == 1, "the turn's model call arrives and is held"
            assert "I heard: I like green tea" not in queued, "queued while the turn still ran"
            release.set()
            shown = term.wait("no reflections yet")
            assert shown.index("I heard: I like green tea") < shown.index("/reflections")
            assert shown.index("/reflections") < shown.index("no reflections yet")
            term.wait(_idle)
            assert "queued" not in term.text()
            _wait_statuses(home, ["end_turn"], "the one turn: a slash command is no turn")
            assert len(server.chat_bodies) == 1, "a slash command calls no model"
        finally:
            release.set()
            term.close()


def test_ctrl_c_at_the_prompt_clears_the_line_and_multi_line_input(tmp_path: Path) -> None:
    home = tmp_path / "home"
    term = Terminal(home)
    try:
        term.line(CHAT)
        term.wait(_prompt_back)
        term.send("never sent")
        term.wait("› never sent")
        term.send("\x03")
        term.wait(lambda text: "› never sent" not in text)
        term.line("first line\\")
        term.line("second line")
        term.wait("I heard: first line")
        term.wait(_prompt_back)
        term.send("\x04")
        term.wait(lambda text: text.rstrip().endswith("$"))
    finally:
        term.close()
    with sqlite3.connect(home / "reverie.sqlite3") as conn:
        users = [r[0] for r in conn.execute("SELECT content FROM messages WHERE role = 'user' AND kind = 'message'")]
    assert users == ["first line\nsecond line"]


def _reflections(home: Path) -> list[tuple[str, str]]:
    with sqlite3.connect(home / "reverie.sqlite3") as conn:
        return [(row[0], row[1]) for row in conn.execute("SELECT trigger, status FROM reflections ORDER BY created_at, rowid")]


def test_ctrl_d_with_a_reflection_running_counts_down_and_ctrl_c_leaves_it_for_the_next_session(tmp_path: Path) -> None:
    """The reflection's model call is held by the loopback server, so it is known to run when
    Ctrl-D is pressed; Ctrl-C during the countdown leaves it ``interrupted``, and the next session
    (a one-shot) relaunches it once the server answers."""
    home = tmp_path / "home"
    held = threading.Event()
    release = threading.Event()

    def answer(body: Any) -> Planned:
        if "TRANSCRIPT_PATH" in str(body):
            held.set()
            release.wait(120)
            return Planned(text="Reflection: nothing new to remember.")
        return Planned(text="noted")

    with LoopbackOpenAI(fallback=answer) as server:
        env = {"REVERIE_BASE_URL": server.base_url, "REVERIE_MODEL": "loopback-model", "OPENAI_API_KEY": "sk-test"}
        term = Terminal(home, **env)
        try:
            term.line(CHAT)
            term.wait(_prompt_back)
            term.line("my name is Ada")
            term.wait("noted")
            term.wait(_idle)
            term.line("/reflect")
            term.wait("reflection started")
            assert held.wait(60), "the reflection's model call arrives and is held"
            term.wait(_idle)
            term.send("\x04")
            counting = term.wait("Ctrl-C to leave it for next time")
            line = next(x for x in counting.splitlines() if "waiting for reflection " in x)
            assert " s left;" in line, line
            term.interrupt()
            term.wait("left for next time")
            term.wait(lambda text: text.rstrip().endswith("$"))
            assert _reflections(home) == [("manual", "interrupted")]
            release.set()
            # printed, not typed: a long checkout path wraps the typed line, and the echo would match
            term.line(f"{CHAT} -p 'hello again'; echo one-shot-$((40 + 2))")
            term.wait(lambda text: "one-shot-42" in text.splitlines())
            assert _reflections(home) == [("manual", "relaunched"), ("relaunch", "no_changes")], term.text()
        finally:
            release.set()
            term.close()


def test_ctrl_d_during_a_turn_says_it_waits_for_the_turn_then_leaves(tmp_path: Path) -> None:
    home = tmp_path / "home"
    held = threading.Event()
    release = threading.Event()

    def answer(body: Any) -> Planned:
        held.set()
        release.wait(120)
        return Planned(text="I heard you")

    with LoopbackOpenAI(fallback=answer) as server:
        term = Terminal(
            home, REVERIE_BASE_URL=server.base_url, REVERIE_MODEL="loopback-model", OPENAI_API_KEY="sk-test",
            REVERIE_REFLECTION_TRIGGER="off",
        )
        try:
            term.line(CHAT)
            term.wait(_prompt_back)
            term.line("hello")
            term.wait("Ctrl-C interrupts")
            assert held.wait(60)
            term.send("\x04")
            shown = term.wait("leaving once this turn ends: waiting for the turn to finish")
            assert "I heard you" not in shown, "said while the turn still ran"
            release.set()
            term.wait("I heard you")
            term.wait(lambda text: text.rstrip().endswith("$"))
            _wait_statuses(home, ["end_turn"], "the turn finished, not cancelled")
        finally:
            release.set()
            term.close()

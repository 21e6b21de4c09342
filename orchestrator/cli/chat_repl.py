"""The interactive ``reverie chat``: a REPL with a line editor on its own thread, slash commands,
Ctrl-C that interrupts a turn (not the session), background notices above the prompt, and the
terminal restored on every way out. ``cli/chat_start.py`` dispatches here for a chat without ``-p``.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import Any, TextIO, cast

import anyio

from orchestrator.app.usage import Tally
from orchestrator.base import blocking
from orchestrator.base.events import Event, ModelCalled, TextDelta
from orchestrator.base.paths import reverie_home
from orchestrator.cli.aio import run_async
from orchestrator.cli.chat_headless import next_line
from orchestrator.cli.chat_slash import Slash, is_slash
from orchestrator.cli.chat_turns import Interrupts, run_turn, warn_unused_model
from orchestrator.cli.errors import describe, user_error_in
from orchestrator.cli.render import TerminalRenderer, terminal_columns

__all__ = ["TurnProgress", "history_file", "interactive", "waiting_line"]


def history_file(agent_id: str) -> Path:
    """Input history is per agent: what you typed to one agent is not offered to another."""
    return reverie_home() / "history" / f"{agent_id}.txt"


def _stderr(line: str) -> None:
    print(line, file=sys.stderr, flush=True)


def interactive(
    agent: str, conversation: str | None, new: bool, cli: dict[str, Any], verbose: bool, model: str | None
) -> int:
    """The REPL; the terminal's mode is saved first and restored on every way out."""
    saved = _save_terminal()
    try:
        return run_async(lambda: _repl(agent, conversation, new, cli, verbose, model))
    finally:
        _restore_terminal(saved)


async def _repl(
    agent: str, conversation: str | None, new: bool, cli: dict[str, Any], verbose: bool, model: str | None
) -> int:
    # lazy: `reverie --help` imports every command module (cli/app.py)
    from orchestrator.app.session import ChatSession

    tty = sys.stdin.isatty() and sys.stdout.isatty()
    editor = None
    if tty:
        # lazy: prompt_toolkit loads only for a terminal (chat -p and piped input never need it)
        from orchestrator.cli.chat_editor import LineEditor

        editor = LineEditor(history_file(agent), sys.stdout)
    out = cast(TextIO, _EditorStream(editor)) if editor is not None else None
    renderer = TerminalRenderer(
        out,
        verbose=verbose,
        above=editor.notice if editor is not None else None,
        columns=partial(terminal_columns, sys.stdout) if editor is not None else None,
    )
    progress = TurnProgress()

    async def observe(event: Event) -> None:
        progress.see(event)
        await renderer(event)

    leave = anyio.Event()
    # at the editor's prompt Ctrl-C is a key (during a turn the editor sends the SIGINT itself); a
    # signal after Enter and before the turn starts cancels that turn, while without a terminal
    # (piped input) it ends the session like a shell's
    interrupts = Interrupts()
    interrupts.idle = leave.set if editor is None else partial(setattr, interrupts, "pending", True)
    async with ChatSession.open(
        agent_id=agent, conversation_id=conversation, new=new, cli=cli, observer=observe
    ) as session, anyio.create_task_group() as tg:
        renderer.memory_dir = session.agent.memory_dir
        renderer.memory_changes = True
        progress.price = session.cost
        tg.start_soon(interrupts.watch)
        warn_unused_model(session, model, _stderr)
        say = renderer.notice
        slash = Slash(session, say, since=await session.runtime.store.last_event_id())
        print(
            f"reverie chat · agent {session.agent.agent_id} · conversation {session.conversation_id} "
            "(/help for commands, Ctrl-D to leave)",
            flush=True,
        )
        loop = _Loop(session, renderer, interrupts, slash, say, progress)
        try:
            try:
                if editor is None:
                    await loop.piped(leave, agent)
                else:
                    await blocking.run_sync("files", editor.start)
                    editor.busy_status = progress.line
                    status = _StatusLine(session, editor, progress)
                    tg.start_soon(status.follow)
                    await loop.edited(editor, status)
            finally:
                if editor is not None:
                    await blocking.run_sync("files", editor.close)
            if not leave.is_set():
                await _wait_for_subagents(session, interrupts)
        finally:
            tg.cancel_scope.cancel()
    if leave.is_set():
        print("reverie: interrupted", file=sys.stderr)
        return 130
    return 0


class _Loop:
    """The REPL's read-and-answer loop, for a terminal (the prompt stays up while a turn runs) and
    for piped input."""

    def __init__(
        self, session: Any, renderer: TerminalRenderer, interrupts: Any, slash: Any, say: Any, progress: TurnProgress
    ) -> None:
        self.session = session
        self.renderer = renderer
        self.interrupts = interrupts
        self.slash = slash
        self.say = say
        self.progress = progress

    async def edited(self, editor: Any, status: _StatusLine) -> None:
        await status.refresh()
        text = await editor.read("› ")
        while text is not None:
            if not text.strip():
                text = await editor.read("› ")
                continue
            if self._leaving(text):
                return
            # the next prompt is up while this entry is answered: typing ahead lands in it
            editor.busy = True
            upcoming = editor.show_prompt("› ")
            try:
                await self.answer(text, error=self.say)
            finally:
                editor.busy = False
                self.interrupts.pending = False
                self.progress.stop()
                await status.refresh()
            if editor.leave_after_turn:
                return
            text = await editor.entry(upcoming)

    async def piped(self, leave: anyio.Event, agent: str) -> None:
        while True:
            text = await _next_line(leave)
            if text is not None and text.strip():
                await blocking.run_sync("files", partial(_remember, history_file(agent), text))
            if text is None:
                return
            if not text.strip():
                continue
            if self._leaving(text):
                return
            await self.answer(text, error=_stderr)

    def _leaving(self, text: str) -> bool:
        return is_slash(text) and text.strip()[1:].split(maxsplit=1)[0].lower() in {"exit", "quit"}

    async def answer(self, text: str, *, error: Any) -> None:
        """One entry: a slash command, or a turn with its outcome and memory change shown."""

        if is_slash(text):
            try:
                await self.slash.run(text)
            except Exception as exc:
                mistake = user_error_in(exc)
                if mistake is None:
                    raise
                self.say(f"reverie: error: {describe(mistake)}")
            return
        self.progress.start()
        result = await run_turn(self.session, text, self.renderer, self.interrupts)
        if result.status == "interrupted":
            self.say("  ⏹ interrupted: the turn is kept as interrupted, with what was streamed")
        elif result.status in {"error", "max_steps", "limit"}:
            error(f"reverie: error: {result.error}" if result.status == "error" else str(result.error))


async def _wait_for_subagents(session: Any, interrupts: Any) -> None:
    """L2: on the way out, the subagents still running get the rest of their time limits, with a
    countdown on stderr; Ctrl-C leaves them for next time (recorded ``interrupted`` as the session
    closes, taken up by the agent's next session), never thrown away as ``failed``."""
    if not session.supervisor.running:
        return
    stop = anyio.Event()
    interrupts.idle = stop.set
    tty = sys.stderr.isatty()
    shown: list[str] = []

    def show(running: list[Any]) -> None:
        line = waiting_line(running)
        if tty:
            sys.stderr.write("\r\x1b[2K" + line)
            sys.stderr.flush()
        elif not shown:
            _stderr(line)
        shown.append(line)

    finished = await session.leave(show, stop)
    if tty and shown:
        sys.stderr.write("\r\x1b[2K")
        sys.stderr.flush()
    if not finished:
        _stderr("reverie: left for next time: what still ran is recorded interrupted; this agent's next session takes it up")


def waiting_line(running: list[Any]) -> str:
    """``waiting for reflection <id> (12 s left; Ctrl-C to leave it for next time)``, and how many more."""
    first = running[0]
    left = "no time limit" if first.seconds_left is None else f"{first.seconds_left:.0f} s left"
    more = f" and {len(running) - 1} more" if len(running) > 1 else ""
    return f"waiting for {first.name}{more} ({left}; Ctrl-C to leave {'them' if more else 'it'} for next time)"


async def _next_line(leave: anyio.Event) -> str | None:
    line = await next_line(leave)
    return line.rstrip("\n") if line is not None else None


def _remember(path: Path, text: str) -> None:
    """Piped input is kept in the agent's history too, in the line editor's file format."""
    # lazy: prompt_toolkit loads only for a terminal (chat -p and piped input never need it)
    from prompt_toolkit.history import FileHistory

    path.parent.mkdir(parents=True, exist_ok=True)
    FileHistory(str(path)).store_string(text)


class _StatusLine:
    """The prompt's bottom line: context use (computed once per prompt) and the subagents running
    (followed while the prompt waits, so a reflection finishing in the background is seen); while
    a turn runs the spinner in front of it moves ten times a second."""

    def __init__(self, session: Any, editor: Any, progress: TurnProgress) -> None:
        self.session = session
        self.editor = editor
        self.progress = progress
        self.context = ""

    async def refresh(self) -> None:
        use = await self.session.context_use()
        percent = f" ({100 * use.tokens / use.window:.0f}%)" if use.window else ""
        self.context = f"context {use.tokens}/{use.window}{percent}"
        self.show()

    def show(self) -> None:
        running = self.session.supervisor.running
        subagents = f" · {running} subagent{'s' if running != 1 else ''} running" if running else ""
        self.editor.set_status(f" {self.session.agent.agent_id} · {self.context}{subagents} · /help")

    async def follow(self) -> None:
        ticks = 0
        while True:
            await anyio.sleep(0.1)
            ticks += 1
            if self.progress.running:
                self.editor.invalidate()
            if self.context and ticks % 5 == 0:
                self.show()


class TurnProgress:
    """What the toolbar shows while a turn runs: a spinner, the elapsed time, the tokens of the
    model calls answered so far (the one streaming counted at chars/4) and their cost when priced."""

    FRAMES = "⠋⠙⠹⠸⠼⠴⠦⠧⠇⠏"

    def __init__(self) -> None:
        self.price: Callable[[Tally], float | None] | None = None
        self.started: float | None = None
        self.tokens_in = 0
        self.tokens_out = 0
        self.streaming = 0

    @property
    def running(self) -> bool:
        return self.started is not None

    def start(self) -> None:
        self.started = time.monotonic()
        self.tokens_in = self.tokens_out = self.streaming = 0

    def stop(self) -> None:
        self.started = None

    def see(self, event: Event) -> None:
        if self.started is None:
            return
        if isinstance(event, TextDelta):
            self.streaming += len(event.text)
        elif isinstance(event, ModelCalled):
            self.tokens_in += event.prompt_tokens
            self.tokens_out += event.completion_tokens
            self.streaming = 0

    def line(self) -> str:
        if self.started is None:
            return ""
        elapsed = time.monotonic() - self.started
        frame = self.FRAMES[int(elapsed * 10) % len(self.FRAMES)]
        out = self.tokens_out + self.streaming // 4
        text = f"{frame} {elapsed:.0f}s · ↑{self.tokens_in:,} ↓{out:,} tokens"
        cost = self.price(Tally(0, self.tokens_in, out)) if self.price is not None else None
        if cost is not None:
            text += f" · ${cost:.4f}"
        return text + " · Ctrl-C interrupts"


class _EditorStream:
    """The renderer's ``out`` in a terminal: streamed text goes through the line editor, so it is
    printed above the prompt that stays up while a turn runs."""

    def __init__(self, editor: Any) -> None:
        self.editor = editor

    def write(self, text: str) -> int:
        self.editor.stream(text)
        return len(text)

    def flush(self) -> None:
        return None


def _save_terminal() -> Any:
    if not sys.stdin.isatty():
        return None
    try:
        # optional: termios exists only on POSIX terminals
        import termios

        return termios.tcgetattr(sys.stdin.fileno())
    except (ImportError, OSError):
        return None


def _restore_terminal(saved: Any) -> None:
    if saved is None:
        return
    try:
        # optional: termios exists only on POSIX terminals
        import termios

        termios.tcsetattr(sys.stdin.fileno(), termios.TCSADRAIN, saved)
    except (ImportError, OSError):
        pass

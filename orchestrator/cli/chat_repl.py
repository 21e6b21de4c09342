"""The interactive ``reverie chat``: a REPL with a line editor on its own thread, slash commands,
Ctrl-C that interrupts a turn (not the session), background notices above the prompt, and the
terminal restored on every way out. ``cli/chat_start.py`` dispatches here for a chat without ``-p``.
"""

from __future__ import annotations

import sys
from functools import partial
from pathlib import Path
from typing import Any

import anyio

from orchestrator.base import blocking
from orchestrator.base.events import Event
from orchestrator.base.paths import reverie_home
from orchestrator.cli.aio import run_async
from orchestrator.cli.errors import describe, user_error_in
from orchestrator.cli.memory_diff import memory_diff
from orchestrator.cli.render import TerminalRenderer

__all__ = ["history_file", "interactive"]


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
    from orchestrator.cli.chat_slash import Slash, is_slash
    from orchestrator.cli.chat_turns import Interrupts, run_turn, warn_unused_model

    tty = sys.stdin.isatty() and sys.stdout.isatty()
    editor = None
    if tty:
        # lazy: prompt_toolkit loads only for a terminal (chat -p and piped input never need it)
        from orchestrator.cli.chat_editor import LineEditor

        editor = LineEditor(history_file(agent), sys.stdout)
    renderer = TerminalRenderer(verbose=verbose, above=editor.notice if editor is not None else None)

    async def observe(event: Event) -> None:
        await renderer(event)

    leave = anyio.Event()
    # at the editor's prompt Ctrl-C is a key; a signal after Enter and before the turn starts
    # cancels that turn, while without a terminal (piped input) it ends the session like a shell's
    interrupts = Interrupts()
    interrupts.idle = leave.set if editor is None else partial(setattr, interrupts, "pending", True)
    async with ChatSession.open(
        agent_id=agent, conversation_id=conversation, new=new, cli=cli, observer=observe
    ) as session, anyio.create_task_group() as tg:
        renderer.memory_dir = session.agent.memory_dir
        tg.start_soon(interrupts.watch)
        warn_unused_model(session, model, _stderr)
        say = renderer.notice
        slash = Slash(session, say, since=await session.runtime.store.last_event_id())
        print(
            f"reverie chat · agent {session.agent.agent_id} · conversation {session.conversation_id} "
            "(/help for commands, Ctrl-D to leave)",
            flush=True,
        )
        try:
            if editor is not None:
                await blocking.run_sync("files", editor.start)
                status = _StatusLine(session, editor)
                tg.start_soon(status.follow)
            while True:
                if editor is not None:
                    await status.refresh()
                    interrupts.pending = False
                    text = await editor.read("› ")
                else:
                    text = await _next_line(leave)
                    if text is not None and text.strip():
                        await blocking.run_sync("files", partial(_remember, history_file(agent), text))
                if text is None:
                    break
                if not text.strip():
                    continue
                if is_slash(text):
                    try:
                        if await slash.run(text):
                            break
                    except Exception as exc:
                        mistake = user_error_in(exc)
                        if mistake is None:
                            raise
                        say(f"reverie: error: {describe(mistake)}")
                    continue
                result = await run_turn(session, text, renderer, interrupts)
                if result.status == "interrupted":
                    say("  ⏹ interrupted: the turn is kept as interrupted, with what was streamed")
                elif result.status in {"error", "max_steps"}:
                    _stderr(f"reverie: error: {result.error}" if result.status == "error" else str(result.error))
                if result.memory_after and result.memory_after != result.memory_before:
                    await _show_memory_change(session, renderer, result.memory_before, result.memory_after)
        finally:
            if editor is not None:
                await blocking.run_sync("files", editor.close)
            tg.cancel_scope.cancel()
    if leave.is_set():
        print("reverie: interrupted", file=sys.stderr)
        return 130
    return 0


async def _next_line(leave: anyio.Event) -> str | None:
    # lazy: `reverie --help` imports every command module (cli/app.py)
    from orchestrator.cli.chat_headless import next_line

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
    (followed while the prompt waits, so a reflection finishing in the background is seen)."""

    def __init__(self, session: Any, editor: Any) -> None:
        self.session = session
        self.editor = editor
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
        while True:
            await anyio.sleep(0.5)
            if self.context:
                self.show()


async def _show_memory_change(session: Any, renderer: TerminalRenderer, before: str | None, after: str) -> None:
    diff = await blocking.run_sync("git", partial(memory_diff, session.agent.memory_dir, before, after))
    if diff is None or not diff.files:
        return
    renderer.notice("\n".join([f"  ↻ memory: {diff.summary}", *diff.render()]))


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

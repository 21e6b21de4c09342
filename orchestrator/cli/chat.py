"""``reverie chat``: talk to an agent, interactively or headless."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Annotated, Any

import anyio
import typer

from orchestrator.base.paths import DEFAULT_AGENT_ID, reverie_home
from orchestrator.cli.aio import run_async
from orchestrator.cli.errors import UserError
from orchestrator.cli.options import AgentOption, ContextWindowOption, ConversationOption
from orchestrator.cli.render import TerminalRenderer

__all__ = ["chat", "register"]


def _require_utf8(option: str, value: str) -> None:
    """Arguments arrive decoded with surrogate escapes; a byte that is not UTF-8 is a user mistake."""
    try:
        value.encode("utf-8")
    except UnicodeEncodeError as exc:
        code = ord(value[exc.start])
        shown = f"byte 0x{code - 0xDC00:02x}" if 0xDC80 <= code <= 0xDCFF else "a character"
        raise UserError(f"{option} is not valid UTF-8 text ({shown} at position {exc.start})") from None


def _cli_settings(context_window: int | None = None, model: str | None = None) -> dict[str, Any]:
    return {"context_window": context_window, "model": model}


def chat(
    prompt: Annotated[str | None, typer.Option("--prompt", "-p", help="Send one message and exit (no REPL).")] = None,
    agent: AgentOption = DEFAULT_AGENT_ID,
    conversation: ConversationOption = None,
    new: Annotated[bool, typer.Option("--new", help="Start a new conversation.")] = False,
    context_window: ContextWindowOption = None,
    model: Annotated[str | None, typer.Option("--model", "-m", help="Model name (with an endpoint configured).")] = None,
) -> None:
    """Talk to an agent. Without -p, an interactive session (history kept; Ctrl-D to leave)."""
    from orchestrator.app.session import ChatSession

    if prompt is not None and not prompt.strip():
        raise UserError("--prompt is empty: give the message to send")
    if prompt is not None:
        _require_utf8("--prompt", prompt)
    renderer = TerminalRenderer()

    async def main() -> int:
        async with ChatSession.open(
            agent_id=agent,
            conversation_id=conversation,
            new=new,
            cli=_cli_settings(context_window, model),
            observer=renderer,
        ) as session:
            if model and not session.runtime.settings.uses_endpoint:
                print(
                    f"reverie: warning: --model {model} has no effect without an endpoint "
                    "(set REVERIE_BASE_URL or model.base_url); using the scripted model",
                    file=sys.stderr,
                )
            if prompt is not None:
                outcome = await session.send(prompt)
                renderer.finish()
                await session.finish_one_shot(lambda line: print(line, file=sys.stderr, flush=True))
                if outcome.status == "error":
                    print(f"reverie: error: {outcome.error}", file=sys.stderr)
                    return 1
                if outcome.status == "max_steps":
                    print(outcome.error, file=sys.stderr)
                    return 3
                return 0
            await _repl(session, renderer)
            return 0

    history_file = reverie_home() / "chat_history"
    if prompt is None:
        _load_readline_history(history_file)
    try:
        code = run_async(main)
    finally:
        renderer.finish()
        if prompt is None:
            _save_readline_history(history_file)
    if code:
        raise typer.Exit(code)


async def _repl(session: Any, renderer: TerminalRenderer) -> None:
    """Read lines until end of input; the readline history is loaded and saved around the event loop
    so Ctrl-C (which cancels everything inside it) still keeps what was typed."""
    print(f"reverie chat · agent {session.agent.agent_id} · conversation {session.conversation_id} (Ctrl-D to leave)")
    marker = "› " if sys.stdin.isatty() else ""
    while True:
        try:
            line = await anyio.to_thread.run_sync(input, marker, abandon_on_cancel=True)
        except EOFError:
            print()
            break
        if not line.strip():
            continue
        outcome = await session.send(line)
        renderer.finish()
        if outcome.status == "error":
            print(f"reverie: error: {outcome.error}", file=sys.stderr)
        elif outcome.status == "max_steps":
            print(outcome.error, file=sys.stderr)


def _load_readline_history(path: Path) -> None:
    try:
        import readline

        if path.exists():
            readline.read_history_file(path)
    except (ImportError, OSError):
        pass


def _save_readline_history(path: Path) -> None:
    try:
        import readline

        path.parent.mkdir(parents=True, exist_ok=True)
        readline.write_history_file(path)
    except (ImportError, OSError):
        pass


def register(app: typer.Typer) -> None:
    app.command("chat")(chat)

"""Headless chat: ``-p TEXT`` once, or stream-json messages from stdin, with text, json or
stream-json output (DECISIONS D13, D14; the formats are described in ``orchestrator.cli.chat``).

Everything a script parses goes to stdout; progress lines (S23's wait) and warnings go to stderr.
Ctrl-C interrupts the running turn (stored ``interrupted``, its result written, exit 130); while
waiting for the next stdin line it ends the session with 130.
"""

from __future__ import annotations

import io
import json
import sys
from collections.abc import Mapping
from typing import Any, TextIO, cast

import anyio

from orchestrator.app.session import ChatSession
from orchestrator.base import blocking
from orchestrator.base.errors import UsageError
from orchestrator.base.events import Event
from orchestrator.cli.chat_turns import Interrupts, TurnResult, run_turn, warn_unused_model
from orchestrator.cli.render import TerminalRenderer

__all__ = ["JsonLines", "next_line", "parse_input_line", "run_headless"]


class JsonLines:
    """An observer writing each event as one JSON line: ``{"type": kind, **payload}``."""

    def __init__(self, out: Any) -> None:
        self.out = out

    def write(self, obj: Mapping[str, Any]) -> None:
        self.out.write(json.dumps(obj, ensure_ascii=False, default=str) + "\n")
        self.out.flush()

    async def __call__(self, event: Event) -> None:
        self.write({"type": event.kind, **event.payload()})


def parse_input_line(line: str, number: int) -> str:
    """The user text of one stdin line; a UsageError naming the line and what is wrong."""
    try:
        obj = json.loads(line)
    except json.JSONDecodeError as exc:
        raise UsageError(f"stdin line {number}: not JSON ({exc.msg} at column {exc.colno})") from None
    if not isinstance(obj, dict):
        raise UsageError(f"stdin line {number}: expected an object like {{\"type\": \"user\", \"text\": \"...\"}}")
    if obj.get("type") != "user":
        raise UsageError(f"stdin line {number}: field \"type\" must be \"user\" (got {obj.get('type')!r})")
    text = obj.get("text")
    if not isinstance(text, str) or not text.strip():
        raise UsageError(f"stdin line {number}: field \"text\" must be a non-empty string")
    return text


def _stderr(line: str) -> None:
    print(line, file=sys.stderr, flush=True)


async def run_headless(
    agent: str,
    conversation: str | None,
    new: bool,
    cli: dict[str, Any],
    prompt: str | None,
    fmt: str,
    verbose: bool,
    model: str | None,
) -> int:
    text_out = fmt == "text"
    # json: nothing but the result on stdout, so the renderer's stream goes nowhere
    renderer = TerminalRenderer(sys.stdout if text_out else cast(TextIO, _Null()), verbose=verbose)
    stream = JsonLines(sys.stdout) if fmt == "stream-json" else None

    async def observe(event: Event) -> None:
        await renderer(event)
        if stream is not None:
            await stream(event)

    async with ChatSession.open(
        agent_id=agent, conversation_id=conversation, new=new, cli=cli, observer=observe
    ) as session, anyio.create_task_group() as tg:
        renderer.memory_dir = session.agent.memory_dir
        leave = anyio.Event()
        interrupts = Interrupts(idle=leave.set)
        tg.start_soon(interrupts.watch)
        warn_unused_model(session, model, _stderr)

        async def finish() -> None:
            """S23's wait; Ctrl-C ends it (what still runs is left to start-up recovery)."""
            async with anyio.create_task_group() as waiting:

                async def stop_on_leave() -> None:
                    await leave.wait()
                    waiting.cancel_scope.cancel()

                waiting.start_soon(stop_on_leave)
                await session.finish_one_shot(_stderr)
                waiting.cancel_scope.cancel()

        def report(result: TurnResult) -> None:
            if text_out:
                if result.status == "error":
                    _stderr(f"reverie: error: {result.error}")
                elif result.status == "max_steps":
                    _stderr(str(result.error))
                elif result.status == "interrupted":
                    _stderr("reverie: interrupted")
            else:
                JsonLines(sys.stdout).write(result.to_json())

        try:
            if prompt is not None:
                result = await run_turn(session, prompt, renderer, interrupts, after_turn=finish)
                report(result)
                code = 130 if leave.is_set() else result.exit_code
                if leave.is_set() and result.status != "interrupted":
                    _stderr("reverie: interrupted while waiting for subagents; start-up recovery finishes their work")
            else:
                code = await _answer_stdin(session, renderer, interrupts, leave, report, finish)
        finally:
            tg.cancel_scope.cancel()
    return code


async def _answer_stdin(
    session: Any, renderer: TerminalRenderer, interrupts: Interrupts, leave: anyio.Event, report: Any, finish: Any
) -> int:
    code = 0
    invalid = False
    number = 0
    while True:
        line = await next_line(leave)
        if line is None:
            break
        number += 1
        if not line.strip():
            continue
        try:
            text = parse_input_line(line, number)
        except UsageError as exc:
            _stderr(f"reverie: error: {exc}")
            invalid = True
            continue
        result = await run_turn(session, text, renderer, interrupts)
        report(result)
        code = result.exit_code
        if code == 130:
            break
    if leave.is_set():
        return 130
    await finish()
    return 1 if invalid and code == 0 else code


async def next_line(leave: anyio.Event) -> str | None:
    """The next stdin line, or None at its end or when Ctrl-C asked to leave."""
    line: str | None = None

    async def read(scope: anyio.CancelScope) -> None:
        nonlocal line
        got = await blocking.run_sync("wait", sys.stdin.readline)
        line = got if got else None
        scope.cancel()

    async def wait_leave(scope: anyio.CancelScope) -> None:
        await leave.wait()
        scope.cancel()

    async with anyio.create_task_group() as tg:
        tg.start_soon(read, tg.cancel_scope)
        tg.start_soon(wait_leave, tg.cancel_scope)
    return None if leave.is_set() else line


class _Null(io.TextIOBase):
    """Where the text renderer writes when stdout is for JSON only."""

    def write(self, text: str) -> int:
        return len(text)

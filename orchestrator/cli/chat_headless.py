"""Headless chat: ``-p TEXT`` once, or stream-json messages from stdin, with text, json or
stream-json output (D13, D14; the formats are described in ``orchestrator.cli.chat``).

Everything a script parses goes to stdout; progress lines (S23's wait), warnings and, in ``text``
output, every line of activity (tools, memory, subagents) go to stderr. ``text`` output puts the
reply alone on stdout, so ``answer=$(reverie chat -p ...)`` is the reply and nothing else: to a
pipe or a file each step's text is written when the step's response is complete, to stdout when it
ends the turn and to stderr when a tool call follows it (commentary, not the reply); to a terminal
it streams as it comes, since a person is reading. With ``--input-format stream-json`` each turn is announced on
stderr by a marker line naming it (``── turn 3 · <turn id> · <the user's line>``), so a log of
stderr reads as the conversation it was.
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
from orchestrator.base.events import Event, ModelCalled, ModelRetrying, TextDelta, TurnEnded, TurnStarted
from orchestrator.cli import collector
from orchestrator.cli.chat_turns import Interrupts, TurnResult, run_turn, warn_unused_model
from orchestrator.cli.render import TerminalRenderer, one_line

__all__ = ["JsonLines", "TurnMarkers", "next_line", "parse_input_line", "run_headless"]


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


class TurnMarkers:
    """The stderr line that opens each turn of a stream-json session in ``text`` output."""

    def __init__(self, say: Any = _stderr) -> None:
        self.say = say
        self.count = 0
        self.text = ""

    def next(self, text: str) -> None:
        """The user's line of the turn about to start."""
        self.count += 1
        self.text = text

    def __call__(self, event: TurnStarted) -> None:
        self.say(f"── turn {self.count} · {event.turn_id} · {one_line(self.text, 100)}")


# the model has answered (or failed) once: the start-up, the SDK's import and its client's first
# request included, is over (cli/collector.py)
_STARTED = (TextDelta, ModelCalled, ModelRetrying, TurnEnded)


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
    # the reply streams only to a terminal; json and a piped text get nothing from the renderer's stream
    live = text_out and sys.stdout.isatty()
    renderer = TerminalRenderer(
        sys.stdout if text_out else cast(TextIO, _Null()),
        verbose=verbose,
        activity=sys.stderr if text_out else cast(TextIO, _Null()),
        reply_only=text_out and not live,
    )
    stream = JsonLines(sys.stdout) if fmt == "stream-json" else None
    markers = TurnMarkers() if text_out and prompt is None else None

    started = False

    async def observe(event: Event) -> None:
        nonlocal started
        if not started and isinstance(event, _STARTED):
            # once: a freeze at every streamed delta would keep each turn's garbage forever
            started = True
            collector.resume()
        if markers is not None and isinstance(event, TurnStarted):
            markers(event)
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
            """S23's wait; Ctrl-C ends it (what still runs is recorded interrupted for the next session, L2)."""
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
                elif result.status in ("max_steps", "limit"):
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
                    _stderr("reverie: interrupted while waiting for subagents: recorded interrupted; this agent's next session takes them up")
            else:
                code = await _answer_stdin(session, renderer, interrupts, leave, report, finish, markers)
        finally:
            tg.cancel_scope.cancel()
    return code


async def _answer_stdin(
    session: Any,
    renderer: TerminalRenderer,
    interrupts: Interrupts,
    leave: anyio.Event,
    report: Any,
    finish: Any,
    markers: TurnMarkers | None,
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
        if markers is not None:
            markers.next(text)
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

"""``reverie chat``'s options checked and dispatched without typer, so a headless ``chat -p`` starts
without importing typer and pydantic (~150 ms of a 0.3 s budget, P1).

``parse_chat_args`` understands only the plain spellings of chat's options (``--prompt TEXT``,
``-p TEXT``, ``--prompt=TEXT``, the two flags) on a headless command line; for anything else
(``--help``, an unknown option, a missing or dash-leading value, a bad ``--context-window``, the
interactive REPL) it returns None and the typer app parses as before, so help and every error
message are typer's own. ``tests/cli/test_chat_start.py`` checks the two parsers agree.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

from orchestrator.base.choices import Choices
from orchestrator.base.config import Flags
from orchestrator.base.paths import DEFAULT_AGENT_ID
from orchestrator.cli.errors import UserError

__all__ = ["INPUT_FORMATS", "OUTPUT_FORMATS", "ChatArgs", "parse_chat_args", "run_fast", "start_chat"]

OUTPUT_FORMATS = Choices.of("text", "json", "stream-json")
"""``--output-format`` of a headless chat (described in ``orchestrator.cli.chat``)."""
INPUT_FORMATS = Choices.of("text", "stream-json")
"""``--input-format``: a terminal's or piped text, or stream-json lines."""
_MIN_CONTEXT_WINDOW = 256

# option spelling -> parameter name, for the options that take a value
_VALUED = {
    "--prompt": "prompt",
    "-p": "prompt",
    "--agent": "agent",
    "-a": "agent",
    "--conversation": "conversation",
    "-c": "conversation",
    "--context-window": "context_window",
    "--model": "model",
    "-m": "model",
    "--output-format": "output_format",
    "--input-format": "input_format",
    "--max-tokens": "max_tokens",
    "--max-cost": "max_cost",
    "--price-in": "price_in",
    "--price-out": "price_out",
    "--reflection-merge": "reflection_merge",
}
_FLAGS = {"--new": "new", "--verbose": "verbose"}


@dataclass(frozen=True)
class ChatArgs:
    """chat's parameters, as typer would pass them."""

    prompt: str | None = None
    agent: str = DEFAULT_AGENT_ID
    conversation: str | None = None
    new: bool = False
    context_window: int | None = None
    model: str | None = None
    output_format: str | None = None
    input_format: str = "text"
    verbose: bool = False
    max_tokens: str | None = None
    """The session's token and cost limits and the prices the cost is counted at, as typed: the
    settings check them (``base/config.py``), so a bad one is named as ``--max-cost``."""
    max_cost: str | None = None
    price_in: str | None = None
    price_out: str | None = None
    reflection_merge: str | None = None


def _stdin_prompt(option: str, value: str) -> bool:
    return value == "-" and _VALUED[option] == "prompt"


def parse_chat_args(argv: Sequence[str], environ: Mapping[str, str] | None = None) -> ChatArgs | None:
    """chat's arguments (after ``chat``), or None where typer must parse (see the module doc)."""
    env = os.environ if environ is None else environ
    values: dict[str, Any] = {"agent": env.get("REVERIE_AGENT") or DEFAULT_AGENT_ID}
    rest = list(argv)
    while rest:
        token = rest.pop(0)
        if token in _FLAGS:
            values[_FLAGS[token]] = True
            continue
        name, eq, inline = token.partition("=")
        if eq and name.startswith("--") and name in _VALUED:
            value = inline
        elif token in _VALUED and rest and (not rest[0].startswith("-") or _stdin_prompt(token, rest[0])):
            name, value = token, rest.pop(0)
        else:
            return None
        param = _VALUED[name]
        if param == "context_window":
            if not (value.isascii() and value.isdigit()) or int(value) < _MIN_CONTEXT_WINDOW:
                return None
            values[param] = int(value)
        else:
            values[param] = value
    args = ChatArgs(**values)
    if args.prompt is None and args.input_format != "stream-json":
        return None
    return args


def _require_utf8(option: str, value: str) -> None:
    """Arguments arrive decoded with surrogate escapes; a byte that is not UTF-8 is a user mistake."""
    try:
        value.encode("utf-8")
    except UnicodeEncodeError as exc:
        code = ord(value[exc.start])
        shown = f"byte 0x{code - 0xDC00:02x}" if 0xDC80 <= code <= 0xDCFF else "a character"
        raise UserError(f"{option} is not valid UTF-8 text ({shown} at position {exc.start})") from None


def _read_stdin_prompt() -> str:
    """``-p -``: the message is stdin, whole (a trailing newline, as ``echo`` adds, is not part of it)."""
    try:
        data = sys.stdin.buffer.read() if hasattr(sys.stdin, "buffer") else sys.stdin.read().encode()
    except KeyboardInterrupt:
        raise
    text = data.decode("utf-8", "surrogateescape")
    _require_utf8("-p - (stdin)", text)
    if not text.strip():
        raise UserError("-p -: stdin is empty: pipe the message in, e.g. echo hi | reverie chat -p -")
    return text.rstrip("\n")


def start_chat(args: ChatArgs) -> int:
    """Check the combination of options (one line for a mistake), run the chat, return its exit code.

    ``-p -`` reads the message from stdin (as ``git commit -F -``); a literal ``-`` is never sent.
    """
    if args.prompt == "-":
        if args.input_format == "stream-json":
            raise UserError("--input-format stream-json reads the messages from stdin: leave out -p")
        args = replace(args, prompt=_read_stdin_prompt())
    for flag, value, choices in (
        ("--output-format", args.output_format, OUTPUT_FORMATS), ("--input-format", args.input_format, INPUT_FORMATS)
    ):
        if value is not None and value not in choices.names:
            raise UserError(f"{flag} {value!r}: use {choices.allowed()}")
    if args.prompt is not None and not args.prompt.strip():
        raise UserError("--prompt is empty: give the message to send")
    if args.prompt is not None:
        _require_utf8("--prompt", args.prompt)
    if args.prompt is not None and args.input_format == "stream-json":
        raise UserError("--input-format stream-json reads the messages from stdin: leave out -p")
    streaming_input = args.input_format == "stream-json"
    fmt = args.output_format or ("stream-json" if streaming_input else "text")
    if args.output_format is not None and args.prompt is None and not streaming_input:
        raise UserError("--output-format is for headless use: give -p TEXT or --input-format stream-json")
    cli = Flags(
        context_window=args.context_window,
        model=args.model,
        limit_session_tokens=args.max_tokens,
        limit_session_cost=args.max_cost,
        price_in=args.price_in,
        price_out=args.price_out,
        reflection_merge=args.reflection_merge,
    )
    # lazy: `reverie --help` imports every command module (cli/app.py)
    from orchestrator.memfs.git import load_pygit2

    load_pygit2()  # every session reads its memory first: here, before the loop has threads
    if args.prompt is not None or streaming_input:
        # lazy: the headless path's own modules, not the REPL's
        from orchestrator.cli.aio import run_async
        from orchestrator.cli.chat_headless import run_headless

        return run_async(
            lambda: run_headless(
                args.agent, args.conversation, args.new, cli, args.prompt, fmt, args.verbose, args.model
            ),
            starting=True,
        )
    # lazy: only the REPL needs the line editor and typer's module
    from orchestrator.cli.chat_repl import interactive

    return interactive(args.agent, args.conversation, args.new, cli, args.verbose, args.model)


def run_fast(args: ChatArgs) -> None:
    """``start_chat`` ending as typer's standalone mode ends a command: exit code via SystemExit,
    Ctrl-C as a silent 130, EOF as typer's abort line, a closed stdout as 1."""
    try:
        code = start_chat(args)
    except KeyboardInterrupt:
        raise SystemExit(130) from None
    except EOFError:
        print(file=sys.stderr)
        # lazy: typer's abort line, only when it is needed
        from typer import rich_utils

        rich_utils.rich_abort_error()
        raise SystemExit(1) from None
    except BrokenPipeError:
        sys.stdout = sys.stderr = open(os.devnull, "w")
        raise SystemExit(1) from None
    if code:
        raise SystemExit(code)

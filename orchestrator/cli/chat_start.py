"""``reverie chat``'s options, parsed without typer, so a chat starts without importing typer and
pydantic (~150 ms of a 0.3 s budget for ``chat -p``, P1).

``CHAT_OPTIONS`` is the one list of chat's options and ``parse_chat_args`` the one function that
reads a command line against it: ``reverie chat`` always parses here, and the typer command of
``cli/chat.py`` is built from the same table only to render ``--help`` (its parsing is this
function too). A mistake is a ``ChatUsageError`` in click's wording, which the command line prints
as one line with exit status 2 as it prints every other command's.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any, Literal

from orchestrator.base.choices import Choices
from orchestrator.base.config import Flags
from orchestrator.base.paths import DEFAULT_AGENT_ID
from orchestrator.cli import collector
from orchestrator.cli.aio import run_async
from orchestrator.cli.errors import UserError
from orchestrator.memfs.libgit import load_pygit2

__all__ = [
    "CHAT_OPTIONS",
    "INPUT_FORMATS",
    "OUTPUT_FORMATS",
    "ChatArgs",
    "ChatOption",
    "ChatUsageError",
    "parse_chat_args",
    "run_fast",
    "start_chat",
]

OUTPUT_FORMATS = Choices.of("text", "json", "stream-json")
"""``--output-format`` of a headless chat (described in ``orchestrator.cli.chat``)."""
INPUT_FORMATS = Choices.of("text", "stream-json")
"""``--input-format``: a terminal's or piped text, or stream-json lines."""


@dataclass(frozen=True)
class ChatOption:
    """One of chat's options: its parameter, its spellings (long first), what ``--help`` says, and how
    its value is read (``text``, an ``int`` of at least ``minimum``, or a ``flag`` without one)."""

    param: str
    spellings: tuple[str, ...]
    help: str
    kind: Literal["text", "int", "flag"] = "text"
    minimum: int | None = None
    envvar: str | None = None


CHAT_OPTIONS: tuple[ChatOption, ...] = (
    ChatOption("prompt", ("--prompt", "-p"), "Send one message and exit (no REPL); - reads it from stdin."),
    ChatOption(
        "agent", ("--agent", "-a"), "Agent id (a folder name under $REVERIE_HOME/agents).", envvar="REVERIE_AGENT"
    ),
    ChatOption("conversation", ("--conversation", "-c"), "Conversation id (default: the agent's latest)."),
    ChatOption("new", ("--new",), "Start a new conversation.", kind="flag"),
    ChatOption(
        "context_window", ("--context-window",), "Context window in tokens (compaction triggers near it).",
        kind="int", minimum=256,
    ),
    ChatOption("model", ("--model", "-m"), "Model name (with an endpoint configured)."),
    ChatOption(
        "output_format", ("--output-format",),
        "Headless output: text (default), json (one result object), stream-json (events, then the result).",
    ),
    ChatOption(
        "input_format", ("--input-format",),
        'text, or stream-json: read {"type": "user", "text": ...} lines from stdin and answer each.',
    ),
    ChatOption("verbose", ("--verbose",), "Show tool calls' raw arguments and longer results.", kind="flag"),
    ChatOption(
        "max_tokens", ("--max-tokens",),
        "Session limit on model tokens ([limits] session_tokens); a turn that would cross it ends with status limit.",
    ),
    ChatOption(
        "max_cost", ("--max-cost",), "Session limit on cost in USD at --price-in/--price-out ([limits] session_cost)."
    ),
    ChatOption("price_in", ("--price-in",), "USD per million prompt tokens ([model] price_in)."),
    ChatOption("price_out", ("--price-out",), "USD per million completion tokens ([model] price_out)."),
    ChatOption(
        "reflection_merge", ("--reflection-merge",), "resolve, keep, or review: hold every reflection for your decision."
    ),
)
"""chat's options, in ``--help``'s order."""

_BY_SPELLING = {spelling: option for option in CHAT_OPTIONS for spelling in option.spellings}
_HELP = "--help"


@dataclass(frozen=True)
class ChatArgs:
    """chat's parameters, one field per entry of ``CHAT_OPTIONS`` (the defaults are here)."""

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


class ChatUsageError(UserError):
    """A command line chat cannot read (click's wording, so it reads as every other command's)."""


def _value(option: ChatOption, name: str, raw: str) -> Any:
    if option.kind != "int":
        return raw
    if not (raw.strip().lstrip("+-").isascii() and raw.strip().lstrip("+-").isdigit()):
        raise ChatUsageError(
            f"Invalid value for '{name}': Input should be a valid integer, unable to parse string as an integer"
        )
    number = int(raw)
    if option.minimum is not None and number < option.minimum:
        raise ChatUsageError(f"Invalid value for '{name}': must be at least {option.minimum}")
    return number


def _extra(tokens: Sequence[str]) -> ChatUsageError:
    many = "s" if len(tokens) > 1 else ""
    return ChatUsageError(f"Got unexpected extra argument{many} ({' '.join(tokens)})")


def parse_chat_args(argv: Sequence[str], environ: Mapping[str, str] | None = None) -> ChatArgs | None:
    """chat's arguments (after ``chat``) read against ``CHAT_OPTIONS``: None when ``--help`` asks for
    the help text; a ``ChatUsageError`` for a command line that does not parse. The last of a
    repeated option wins; an option's value is the next word whatever it is (``-p --new`` sends
    "--new"), and ``--name=value``, ``-xvalue`` and ``--`` (end of options) read as click reads them."""
    env = os.environ if environ is None else environ
    values: dict[str, Any] = {}
    for declared in CHAT_OPTIONS:
        if declared.envvar and env.get(declared.envvar):
            values[declared.param] = env[declared.envvar]
    rest = list(argv)
    while rest:
        token = rest.pop(0)
        if token == "--":
            if rest:
                raise _extra(rest)
            break
        if token == _HELP:
            return None
        if not token.startswith("-") or token == "-":
            raise _extra([token, *rest])
        name, eq, inline = token.partition("=") if token.startswith("--") else (token[:2], "", token[2:])
        option = _BY_SPELLING.get(name)
        if option is None:
            raise ChatUsageError(f"No such option: {name}")
        attached = bool(eq) or bool(inline)
        if option.kind == "flag":
            if attached:
                raise ChatUsageError(f"Option '{name}' does not take a value")
            values[option.param] = True
            continue
        if attached:
            raw = inline
        elif rest:
            raw = rest.pop(0)
        else:
            raise ChatUsageError(f"Option '{name}' requires an argument")
        values[option.param] = _value(option, name, raw)
    return ChatArgs(**values)


def _interactive(args: ChatArgs) -> bool:
    """Whether ``args`` start the REPL (no ``-p``, no stream of messages on stdin)."""
    return args.prompt is None and args.input_format != "stream-json"


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

    load_pygit2()  # every session reads its memory first: here, before the loop has threads
    if args.prompt is not None or streaming_input:
        # lazy: the headless path's session and turn; `reverie --help` reads chat's options here
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
    Ctrl-C as a silent 130 (the REPL's: ``reverie: interrupted``), EOF as typer's abort line, a
    closed stdout as 1."""
    repl = _interactive(args)
    if repl:
        collector.resume()  # the REPL's start-up is over once its loop runs (cli/collector.py)
    try:
        code = start_chat(args)
    except (KeyboardInterrupt, EOFError) as exc:
        if repl:
            print(file=sys.stderr)
            print("reverie: interrupted", file=sys.stderr)
            raise SystemExit(130) from None
        if isinstance(exc, KeyboardInterrupt):
            raise SystemExit(130) from None
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

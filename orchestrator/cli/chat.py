"""``reverie chat``: talk to an agent, interactively (a REPL with a line editor, slash commands and
Ctrl-C that interrupts a turn) or headless (``-p`` with text, json or stream-json output, or
``--input-format stream-json`` for many messages through one process; D13, D14).

Headless output: ``text`` puts the reply alone on stdout and activity on stderr (``-p -`` reads the
message from stdin); ``json`` prints one result object after the turn
and S23's wait; ``stream-json`` prints one object per line, ``{"type": <event kind>, ...payload}``
in the vocabulary of docs/events.md, and ends with the same result object (``"type": "result"``).
With ``--input-format stream-json`` every stdin line ``{"type": "user", "text": "..."}`` is
answered in the same conversation, one result object each; S23's wait happens once, at the end
of input. The exit code is the last turn's (0 done, 1 error, 3 max_steps, 4 limit, 130 interrupted), or 1
when an input line was invalid.
"""

from __future__ import annotations

import inspect
from dataclasses import asdict, fields
from typing import Any

import typer
from typer.core import TyperCommand

from orchestrator.cli.chat_start import CHAT_OPTIONS, ChatArgs, ChatOption, parse_chat_args, start_chat

__all__ = ["chat", "register"]

_TYPES: dict[str, Any] = {"text": str | None, "int": int | None, "flag": bool}
_DEFAULTS = {f.name: f.default for f in fields(ChatArgs)}


class _ChatCommand(TyperCommand):
    """chat as typer shows it: its options, built from ``CHAT_OPTIONS``, render ``--help``; a
    command line is read by ``parse_chat_args``, the one parser of chat (``cli/chat_start.py``)."""

    def parse_args(self, ctx: Any, args: list[str]) -> list[str]:
        parsed = parse_chat_args(args)
        if parsed is None:
            return super().parse_args(ctx, ["--help"])  # prints the help and exits
        ctx.params.update(asdict(parsed))
        return []


def _parameter(option: ChatOption) -> inspect.Parameter:
    default = _DEFAULTS[option.param]
    annotation = str if option.kind == "text" and default is not None else _TYPES[option.kind]
    info = typer.Option(default, *option.spellings, help=option.help, envvar=option.envvar, min=option.minimum)
    return inspect.Parameter(option.param, inspect.Parameter.KEYWORD_ONLY, default=info, annotation=annotation)


def chat(**params: Any) -> None:
    """Talk to an agent. Without -p, an interactive session (/help lists the commands; Ctrl-D leaves).

    Exit codes: 0 done, 1 error, 3 stopped at max_steps, 4 stopped at a limit, 130 interrupted.
    """
    code = start_chat(ChatArgs(**params))
    if code:
        raise typer.Exit(code)


chat.__signature__ = inspect.Signature([_parameter(option) for option in CHAT_OPTIONS])  # type: ignore[attr-defined]


def register(app: typer.Typer) -> None:
    app.command("chat", cls=_ChatCommand)(chat)

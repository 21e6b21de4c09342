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

from typing import Annotated

import typer

from orchestrator.base.paths import DEFAULT_AGENT_ID
from orchestrator.cli.chat_start import ChatArgs, start_chat
from orchestrator.cli.options import AgentOption, ContextWindowOption, ConversationOption

__all__ = ["chat", "register"]


def chat(
    prompt: Annotated[str | None, typer.Option("--prompt", "-p", help="Send one message and exit (no REPL); - reads it from stdin.")] = None,
    agent: AgentOption = DEFAULT_AGENT_ID,
    conversation: ConversationOption = None,
    new: Annotated[bool, typer.Option("--new", help="Start a new conversation.")] = False,
    context_window: ContextWindowOption = None,
    model: Annotated[str | None, typer.Option("--model", "-m", help="Model name (with an endpoint configured).")] = None,
    output_format: Annotated[
        str | None,
        typer.Option("--output-format", help="Headless output: text (default), json (one result object), stream-json (events, then the result)."),
    ] = None,
    input_format: Annotated[
        str,
        typer.Option("--input-format", help="text, or stream-json: read {\"type\": \"user\", \"text\": ...} lines from stdin and answer each."),
    ] = "text",
    verbose: Annotated[bool, typer.Option("--verbose", help="Show tool calls' raw arguments and longer results.")] = False,
    max_tokens: Annotated[str | None, typer.Option("--max-tokens", help="Session limit on model tokens ([limits] session_tokens); a turn that would cross it ends with status limit.")] = None,
    max_cost: Annotated[str | None, typer.Option("--max-cost", help="Session limit on cost in USD at --price-in/--price-out ([limits] session_cost).")] = None,
    price_in: Annotated[str | None, typer.Option("--price-in", help="USD per million prompt tokens ([model] price_in).")] = None,
    price_out: Annotated[str | None, typer.Option("--price-out", help="USD per million completion tokens ([model] price_out).")] = None,
    reflection_merge: Annotated[
        str | None,
        typer.Option("--reflection-merge", help="resolve, keep, or review: hold every reflection for your decision."),
    ] = None,
) -> None:
    """Talk to an agent. Without -p, an interactive session (/help lists the commands; Ctrl-D leaves).

    Exit codes: 0 done, 1 error, 3 stopped at max_steps, 4 stopped at a limit, 130 interrupted.
    """
    code = start_chat(
        ChatArgs(
            prompt, agent, conversation, new, context_window, model, output_format, input_format, verbose,
            max_tokens, max_cost, price_in, price_out, reflection_merge,
        )
    )
    if code:
        raise typer.Exit(code)


def register(app: typer.Typer) -> None:
    app.command("chat")(chat)


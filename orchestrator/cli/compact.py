"""``reverie compact``: compact a conversation now (COMPACTION-1.3, trigger ``manual``).

It runs the same subagent as automatic compaction, under the conversation's turn lock, so the
summary, the recompiled prompt, the re-armed reminders and the ``compaction.done`` event (which
starts reflection) are exactly what a turn would produce. There is no size check: a manual
compaction compacts whatever is there, and says so when nothing could be evicted.
"""

from __future__ import annotations

from typing import Annotated, Any

import typer

from orchestrator.base.choices import BadValue
from orchestrator.base.config import COMPACTION_MODES, parse_setting
from orchestrator.base.paths import DEFAULT_AGENT_ID
from orchestrator.cli.aio import run_async
from orchestrator.cli.commands import require_agent_in_home
from orchestrator.cli.errors import UserError
from orchestrator.cli.options import AgentOption, ContextWindowOption, ConversationOption
from orchestrator.cli.render import compaction_line

__all__ = ["compact", "register"]


def compact(
    agent: AgentOption = DEFAULT_AGENT_ID,
    conversation: ConversationOption = None,
    mode: Annotated[
        str | None, typer.Option("--mode", help=f"{COMPACTION_MODES.allowed()} (default: the configured mode).")
    ] = None,
    context_window: ContextWindowOption = None,
) -> None:
    """Compact a conversation now: summarise older messages, keep the recent ones."""
    if mode is not None:
        try:
            parse_setting("compaction_mode", mode)
        except BadValue as exc:
            raise UserError(f"--mode {mode!r}: {exc}") from None
    # lazy: `reverie --help` imports every command module (cli/app.py)
    from orchestrator.api import open_session

    async def main() -> Any:
        await require_agent_in_home(agent)
        async with open_session(agent, conversation, settings={"context_window": context_window}) as session:
            return await session.compact(mode=mode)  # type: ignore[arg-type]

    result = run_async(main)
    print(compaction_line(result))
    if result.status == "error":
        raise typer.Exit(1)


def register(app: typer.Typer) -> None:
    app.command("compact")(compact)

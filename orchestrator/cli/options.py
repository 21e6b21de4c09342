"""Command-line options shared by several commands, in a module of their own so a command can use
them without importing another command's module (start-up stays lazy)."""

from __future__ import annotations

from typing import Annotated

import typer

__all__ = ["AgentOption", "ContextWindowOption", "ConversationOption"]

AgentOption = Annotated[
    str, typer.Option("--agent", "-a", help="Agent id (a folder name under $REVERIE_HOME/agents).", envvar="REVERIE_AGENT")
]
ConversationOption = Annotated[
    str | None, typer.Option("--conversation", "-c", help="Conversation id (default: the agent's latest).")
]
ContextWindowOption = Annotated[
    int | None, typer.Option("--context-window", help="Context window in tokens (compaction triggers near it).", min=256)
]

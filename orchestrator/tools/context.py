"""What every tool receives (``ToolContext``) and returns (``ToolResult``).

A context is made in one place, ``ToolContext.from_settings``: the turn loop, reflection and the
merge resolver each name only what differs for them (their checkout, their label, extra files they
may read), and everything the settings decide (timeout, sandbox, network, write limit, environment,
secrets, overflow files) is derived there once, so a tool that needs one more setting changes this module
alone (docs/architecture.md, "How subagents plug in").
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from orchestrator.base.config import Settings
from orchestrator.base.errors import ReverieError
from orchestrator.tools.overflow import overflow_dir_for
from orchestrator.tools.truncation import BASH_OUTPUT_CHARS

if TYPE_CHECKING:
    from orchestrator.store import Store

__all__ = ["DEFAULT_BASH_TIMEOUT", "ToolContext", "ToolError", "ToolResult"]

DEFAULT_BASH_TIMEOUT = 120.0
"""S20."""


@dataclass(frozen=True)
class ToolContext:
    """The calling agent's world. File tools are confined to ``workspace`` and ``memory_dir``.

    ``overflow_dir``: where a truncated output's full text is written (COMPACTION-7.5); None turns
    overflow files off. ``middle_truncate`` False keeps the head instead of head and tail. The turn
    loop sets them from ``[tools] overflow_to_file`` / ``middle_truncate`` (``REVERIE_TOOL_OVERFLOW_TO_FILE``,
    ``REVERIE_TOOL_MIDDLE_TRUNCATE``; default true), the directory being ``overflow_dir_for(workspace)``
    under ``$REVERIE_HOME`` (D6), which is also a read-only root.

    ``sandbox``, ``network`` and ``env_names`` are ``[tools] sandbox``, ``network`` and ``env``
    (D11; ``orchestrator.tools.sandbox``); no variable whose value is one of ``secrets``
    (the configured API key) reaches a command. ``read_roots`` are directories ``read_file`` may
    read but no tool may write (D5, D6: a reflection's transcript, the overflow files).
    ``write_limit_mb`` is ``[tools] write_limit_mb``: what one command may write (``tools.sandbox``).
    """

    workspace: Path
    agent_id: str
    conversation_id: str
    agent_name: str = ""
    memory_dir: Path | None = None
    store: Store | None = None
    bash_timeout: float = DEFAULT_BASH_TIMEOUT
    output_cap: int = BASH_OUTPUT_CHARS
    overflow_dir: Path | None = None
    middle_truncate: bool = True
    extra_env: Mapping[str, str] = field(default_factory=dict)
    sandbox: str = "auto"
    network: bool = True
    env_names: tuple[str, ...] = ()
    secrets: tuple[str, ...] = ()
    read_roots: tuple[Path, ...] = ()
    write_limit_mb: int = Settings.write_limit_mb

    @classmethod
    def from_settings(
        cls,
        settings: Settings,
        *,
        workspace: Path,
        agent_id: str,
        conversation_id: str,
        agent_name: str = "",
        memory_dir: Path | None = None,
        store: Store | None = None,
        overflow: bool = False,
        extra_env: Mapping[str, str] | None = None,
        read_roots: tuple[Path, ...] = (),
    ) -> ToolContext:
        """The context of an agent acting under ``settings``: the one constructor every caller uses.

        ``overflow`` asks for overflow files (the turn loop's tools; a subagent's outputs are only
        truncated), written under ``overflow_dir_for(workspace)`` when ``[tools] overflow_to_file`` is
        on, and readable from then on."""
        overflow_dir = overflow_dir_for(workspace) if overflow and settings.overflow_to_file else None
        return cls(
            workspace=workspace,
            agent_id=agent_id,
            conversation_id=conversation_id,
            agent_name=agent_name,
            memory_dir=memory_dir,
            store=store,
            bash_timeout=settings.bash_timeout,
            overflow_dir=overflow_dir,
            middle_truncate=settings.middle_truncate,
            extra_env=dict(extra_env or {}),
            sandbox=settings.sandbox,
            network=settings.network,
            write_limit_mb=settings.write_limit_mb,
            env_names=settings.tool_env,
            secrets=(settings.api_key,) if settings.api_key else (),
            read_roots=read_roots + ((overflow_dir,) if overflow_dir is not None else ()),
        )


@dataclass(frozen=True)
class ToolResult:
    """``output`` is what the model sees as the tool message; ``ok`` False marks an error result."""

    ok: bool
    output: str


class ToolError(ReverieError):
    """A tool refusing or failing in a way the model should read: the message is one line, no traceback."""

"""Where reverie keeps things on disk.

Every location derives from ``REVERIE_HOME`` (default ``~/.reverie``) unless a more specific
variable overrides it, so tests and batch runs isolate themselves by setting one variable.
"""

from __future__ import annotations

import os
import re
from pathlib import Path

from orchestrator.base.errors import UsageError

__all__ = [
    "DEFAULT_AGENT_ID",
    "agent_dir",
    "agent_memory_dir",
    "check_agent_id",
    "config_path",
    "reverie_home",
    "store_path",
    "worktrees_root",
]

DEFAULT_AGENT_ID = "agent-default"
_AGENT_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$")


def reverie_home() -> Path:
    """``$REVERIE_HOME`` or ``~/.reverie``."""
    raw = os.environ.get("REVERIE_HOME")
    return Path(raw).expanduser() if raw else Path.home() / ".reverie"


def check_agent_id(agent_id: str) -> str:
    """Return ``agent_id`` if it is safe as a directory name, else raise ``UsageError`` saying why."""
    if not _AGENT_ID.match(agent_id):
        raise UsageError(
            f"invalid agent id {agent_id!r}: use letters, digits, '.', '_' or '-' (at most 128, not starting with a symbol)"
        )
    return agent_id


def agent_dir(agent_id: str) -> Path:
    return reverie_home() / "agents" / check_agent_id(agent_id)


def agent_memory_dir(agent_id: str) -> Path:
    """The agent's MemFS repository: ``$REVERIE_HOME/agents/<agent-id>/memory``."""
    return agent_dir(agent_id) / "memory"


def store_path() -> Path:
    """The SQLite conversation store shared by every agent of this home."""
    return reverie_home() / "reverie.sqlite3"


def config_path() -> Path:
    return reverie_home() / "config.toml"


def worktrees_root() -> Path:
    """R1: ``$REVERIE_WORKTREES``, else ``$REVERIE_HOME/worktrees``."""
    raw = os.environ.get("REVERIE_WORKTREES")
    return Path(raw).expanduser() if raw else reverie_home() / "worktrees"

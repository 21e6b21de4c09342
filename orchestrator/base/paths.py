"""Where reverie keeps things on disk: a ``Home``.

Every location derives from one ``Home``: its root (``REVERIE_HOME``, default ``~/.reverie``) and
its worktree root (``REVERIE_WORKTREES``, default ``<root>/worktrees``). The process environment
only gives the default home. A program that drives reverie as a library passes a ``Home`` down
instead (``using_home``), and a batch run gives each of its tasks the run's home the same way, so a
batch and a chat can share one process without one moving the other's files.

Why a context variable rather than a parameter on every function: some thirty call sites, from the
store to the worktrees and the transcript payloads, ask "where"; threading a ``Home`` through each
signature would touch every layer for a value that changes only at a session's or a task's edge.
The variable is scoped like a parameter is: set for a block, seen by the tasks started inside it
and by the worker threads they hand blocking work to (``blocking.run_sync`` and anyio's
``to_thread`` copy the caller's context), never by anything else in the process.
"""

from __future__ import annotations

import contextvars
import os
import re
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from orchestrator.base.errors import UsageError

__all__ = [
    "DEFAULT_AGENT_ID",
    "Home",
    "PathArg",
    "as_home",
    "as_path",
    "current_home",
    "using_home",
    "agent_dir",
    "agent_memory_dir",
    "check_agent_id",
    "config_path",
    "reverie_home",
    "store_path",
    "worktrees_root",
]

DEFAULT_AGENT_ID = "agent-default"

PathArg = str | os.PathLike[str]
"""What the library takes wherever it takes a path: what ``open`` and ``pathlib.Path`` take."""

_AGENT_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$")


@dataclass(frozen=True)
class Home:
    """Where one reverie world lives: agents, the store, the config file, worktrees, transcripts.

    ``worktrees`` defaults to ``<root>/worktrees``. ``scratch`` marks a batch run's home, whose task
    stores are rebuilt from scratch when a task reruns, so they skip syncs
    (``store.schema.configure_connection`` says why).
    """

    root: Path
    worktrees: Path | None = None
    scratch: bool = False

    def __post_init__(self) -> None:
        object.__setattr__(self, "root", as_path(self.root, "root"))
        if self.worktrees is not None:
            object.__setattr__(self, "worktrees", as_path(self.worktrees, "worktrees"))

    @classmethod
    def from_environment(cls, environ: Mapping[str, str] | None = None) -> Home:
        """``$REVERIE_HOME`` (or ``~/.reverie``) and ``$REVERIE_WORKTREES``."""
        env = os.environ if environ is None else environ
        raw, trees = env.get("REVERIE_HOME"), env.get("REVERIE_WORKTREES")
        root = Path(raw).expanduser() if raw else Path.home() / ".reverie"
        return cls(root=root, worktrees=Path(trees).expanduser() if trees else None)

    @property
    def worktrees_root(self) -> Path:
        return self.worktrees if self.worktrees is not None else self.root / "worktrees"

    @property
    def store_path(self) -> Path:
        return self.root / "reverie.sqlite3"

    @property
    def config_path(self) -> Path:
        return self.root / "config.toml"

    def agent_memory_dir(self, agent_id: str) -> Path:
        return self.root / "agents" / check_agent_id(agent_id) / "memory"


_home: contextvars.ContextVar[Home | None] = contextvars.ContextVar("reverie_home", default=None)


def current_home() -> Home:
    """The home set by the innermost ``using_home`` around the caller, else the environment's."""
    return _home.get() or Home.from_environment()


@contextmanager
def using_home(home: Home) -> Iterator[Home]:
    """Make ``home`` the current home for the block (and the tasks and worker threads it starts)."""
    token = _home.set(home)
    try:
        yield home
    finally:
        _home.reset(token)


def reverie_home() -> Path:
    """The current home's root (``current_home``)."""
    return current_home().root


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
    """R1: the current home's worktree root (``$REVERIE_WORKTREES``, else ``<home>/worktrees``)."""
    return current_home().worktrees_root


def as_path(value: object, parameter: str) -> Path:
    """``value`` as a ``Path``: a ``str`` or any ``os.PathLike`` is accepted, as Python's own file
    functions accept them; anything else is a ``TypeError`` naming ``parameter`` at the call, not
    an ``AttributeError`` from deep inside."""
    if isinstance(value, Path):
        return value
    if isinstance(value, str | os.PathLike):
        raw = os.fspath(value)
        if isinstance(raw, str):
            return Path(raw)
    raise TypeError(f"{parameter} must be a path (str or os.PathLike), not {type(value).__name__}")


def as_home(value: object, parameter: str = "home") -> Home:
    """``value`` as a ``Home``: a ``Home`` as it is, a path as the root of one."""
    if isinstance(value, Home):
        return value
    return Home(as_path(value, parameter))

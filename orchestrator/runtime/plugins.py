"""How subagents plug into the runtime without the runtime knowing them (D9).

The runtime and the supervisor sit below ``subagents``: reflection and compaction are built on the
turn loop and spawned by the supervisor, so if the supervisor imported them back the two layers
would form one loop (it did, behind function-local imports). Instead this module declares what the
runtime needs from a plugin, the composition root (``orchestrator.app.session``) builds the plugins
and passes them in, and the runtime calls them without naming them, as anyio's front end reaches a
backend by interface only. Each protocol says when it is called and what may fail:

* a ``StartupRecovery`` runs once per agent per process when ``Runtime.agent`` first loads it, before
  any turn (R6: finish or record what a dead process left behind);
* a ``CompactorFactory`` builds the agent's ``Compactor`` for a session's turn runner, sharing the
  session's ``SessionContext`` (one holder of its live state);
* an ``AfterTurnHook`` runs after every finished turn (reflection triggers); a failure is recorded by
  the supervisor, never raised into the turn.

A plugin that spawns background work gets the supervisor only as a ``Spawner``.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from orchestrator.agent.context import SessionContext
from orchestrator.agent.turn import Compactor, TurnOutcome, TurnRunner
from orchestrator.store import Store

__all__ = ["AfterTurnHook", "CompactorFactory", "Plugins", "Spawner", "StartupRecovery"]

AfterTurnHook = Callable[[TurnRunner, TurnOutcome], Awaitable[None]]


class Spawner(Protocol):
    """The part of the supervisor a subagent uses: start a child task whose failure is contained
    (recorded as ``subagent.failed``) and whose cancellation follows the supervisor's; ``watch``
    starts one that is not subagent work (an idle timer)."""

    def spawn(self, name: str, fn: Callable[[], Awaitable[Any]]) -> None: ...

    def watch(self, name: str, fn: Callable[[], Awaitable[Any]]) -> None: ...


class StartupRecovery(Protocol):
    """Reconcile an agent's memory repository and store with what earlier processes left unfinished.

    Called before the agent's first turn in this process; an exception propagates to whoever loads
    the agent (a damaged repository is the user's to see)."""

    def __call__(self, store: Store, agent_id: str, memory_dir: Path, /) -> Awaitable[object]: ...


class CompactorFactory(Protocol):
    """The ``Compactor`` for one agent's turns in a session; ``supervisor`` runs its background work."""

    def __call__(self, *, context: SessionContext, supervisor: Spawner) -> Compactor: ...


@dataclass(frozen=True)
class Plugins:
    """The plugins a composition root installs; the empty set is a runtime with no subagents (no
    recovery, no compaction), which is what the layers below need to be testable alone."""

    recovery: Sequence[StartupRecovery] = ()
    compactor: CompactorFactory | None = None

"""How subagents plug into the runtime without the runtime knowing them (D9).

The runtime and the supervisor sit below ``subagents``: reflection and compaction are built on the
turn loop and spawned by the supervisor, so if the supervisor imported them back the two layers
would form one loop (it did, behind function-local imports). Instead this module declares what the
runtime needs from a plugin, the composition root (``orchestrator.app.session``) names the plugins
once in a ``Plugins`` value and passes it in, and ``Plugins.install`` builds a session's plugins
without naming them, as anyio's front end reaches a backend by interface only. Each protocol says
when it is called and what may fail:

* a ``StartupRecovery`` runs once per agent per process when ``Runtime.agent`` first loads it, before
  any turn (R6: finish or record what a dead process left behind);
* a ``CompactorFactory`` builds the agent's ``SessionCompactor`` for a session's turn runner, sharing
  the session's ``SessionContext`` (one holder of its live state); the session asks it to compact
  now and closes it at its end;
* a ``ReflectorFactory`` builds the session's ``Reflector``, installed as an ``AfterTurnHook`` (runs
  after every finished turn; a failure is recorded by the supervisor, never raised into the turn)
  and shown every event the session publishes;
* a ``ResolverFactory`` builds the merge resolver reflection hands to merge-back (D3's ``resolve``
  policy; ``keep`` installs none).

A plugin that spawns background work gets the supervisor only as a ``Spawner``. A new subagent is a
module of its own, a protocol here if none fits, and one field of ``Plugins``.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, MutableSequence, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

import anyio

from orchestrator.agent.context import SessionContext
from orchestrator.agent.turn import Compactor, TurnOutcome, TurnRunner
from orchestrator.base.events import Event
from orchestrator.compaction.result import CompactionResult
from orchestrator.compaction.settings import CompactionMode
from orchestrator.models.types import ModelClient
from orchestrator.store import Store

if TYPE_CHECKING:
    from orchestrator.memfs.resolution import Resolver

__all__ = [
    "AfterTurnHook",
    "CompactorFactory",
    "Host",
    "Installed",
    "Plugins",
    "Reflector",
    "ReflectorFactory",
    "ResolverFactory",
    "SessionCompactor",
    "Spawner",
    "StartupRecovery",
]

AfterTurnHook = Callable[[TurnRunner, TurnOutcome], Awaitable[None]]


class Spawner(Protocol):
    """The part of the supervisor a subagent uses: start a child task whose failure is contained
    (recorded as ``subagent.failed``) and whose cancellation follows the supervisor's, given its
    time limit (``seconds``) so a session's end can wait that long for it; ``watch`` starts one
    that is not subagent work (an idle timer)."""

    def spawn(self, name: str, fn: Callable[[], Awaitable[Any]], *, seconds: float | None = None) -> None: ...

    @property
    def leaving(self) -> bool:
        """The session is ending: work cancelled now is ``interrupted``, kept for the next session (L2)."""
        ...

    def watch(self, name: str, fn: Callable[[], Awaitable[Any]]) -> None: ...


class Host(Spawner, Protocol):
    """The part of the supervisor ``Plugins.install`` uses: it spawns, and runs hooks after turns."""

    @property
    def after_turn_hooks(self) -> MutableSequence[AfterTurnHook]: ...


class StartupRecovery(Protocol):
    """Reconcile an agent's memory repository and store with what earlier processes left unfinished.

    Called before the agent's first turn in this process; an exception propagates to whoever loads
    the agent (a damaged repository is the user's to see)."""

    def __call__(self, store: Store, agent_id: str, memory_dir: Path, /) -> Awaitable[object]: ...


class SessionCompactor(Compactor, Protocol):
    """A ``Compactor`` the session also drives: a manual compaction (the caller holds the
    conversation's turn lock) and its close at the session's end (every started compaction ends)."""

    async def compact_now(self, conversation_id: str, *, mode: CompactionMode | None = None) -> CompactionResult: ...

    async def close(self) -> None: ...


class CompactorFactory(Protocol):
    """The ``SessionCompactor`` for one agent's turns in a session; ``supervisor`` runs its background work."""

    def __call__(self, *, context: SessionContext, supervisor: Spawner) -> SessionCompactor: ...


class Reflector(Protocol):
    """A session's reflection: triggered after turns and by events (a compaction arms it), or now."""

    @property
    def active(self) -> bool:
        """A reflection of this agent is running in this session."""
        ...

    @property
    def resolver(self) -> Resolver | None:
        """What reconciles this session's conflicting merge-backs (a person's merge and an undo too)."""
        ...

    async def after_turn(self, runner: TurnRunner, outcome: TurnOutcome) -> None: ...

    async def on_event(self, event: Event, conversation_id: str | None) -> None: ...

    async def maybe_launch(self, conversation_id: str, *, manual: bool = False) -> str:
        """Start a reflection when the trigger says so (always when ``manual``); why or why not."""
        ...

    async def relaunch_interrupted(self) -> str | None:
        """Launch again a reflection the agent's last session ended before it finished (L2); why, or
        None when none waited. The session calls it once, as it opens."""
        ...

    async def idle(self, conversation_id: str, seconds: float) -> str | None:
        """The conversation has been idle ``seconds``: a trigger that asks to be consulted after that
        long is; why, or None when none asks."""
        ...


class ReflectorFactory(Protocol):
    """The ``Reflector`` of a session; ``resolver`` reconciles a conflicting merge-back (or None);
    ``idle_wait`` is how it waits out an idle spell between turns (``anyio.sleep``, or a test's event)."""

    def __call__(
        self,
        *,
        context: SessionContext,
        supervisor: Spawner,
        resolver: Resolver | None,
        idle_wait: Callable[[float], Awaitable[None]],
    ) -> Reflector: ...


class ResolverFactory(Protocol):
    """The merge resolver of a session, calling ``model`` (the session's, metered as a subagent's)."""

    def __call__(self, *, context: SessionContext, model: ModelClient) -> Resolver: ...


@dataclass(frozen=True)
class Installed:
    """A session's plugins as built by ``Plugins.install``: what the turn runner consults before
    each request and what the session offers (compact now, reflect now)."""

    compactor: SessionCompactor | None = None
    reflection: Reflector | None = None


@dataclass(frozen=True)
class Plugins:
    """The plugins a composition root installs; the empty set is a runtime with no subagents (no
    recovery, no compaction, no reflection), which is what the layers below need to be testable alone."""

    recovery: Sequence[StartupRecovery] = ()
    compactor: CompactorFactory | None = None
    reflection: ReflectorFactory | None = None
    resolver: ResolverFactory | None = None

    def install(
        self,
        *,
        context: SessionContext,
        supervisor: Host,
        resolver_model: ModelClient,
        idle_wait: Callable[[float], Awaitable[None]] = anyio.sleep,
    ) -> Installed:
        """Build a session's plugins and hook reflection into ``supervisor``'s after-turn hooks. The
        resolver is built when ``[reflection] merge`` is ``resolve`` (D3) or ``review`` (V1: a
        person's merge uses it) and reflection is installed; reflection waits out idle spells with
        ``idle_wait``."""
        compactor = self.compactor(context=context, supervisor=supervisor) if self.compactor is not None else None
        reflection = None
        if self.reflection is not None:
            resolver = None
            if self.resolver is not None and context.settings.reflection_merge in ("resolve", "review"):
                resolver = self.resolver(context=context, model=resolver_model)
            reflection = self.reflection(context=context, supervisor=supervisor, resolver=resolver, idle_wait=idle_wait)
            supervisor.after_turn_hooks.append(reflection.after_turn)
        return Installed(compactor, reflection)

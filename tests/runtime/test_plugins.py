"""``Plugins.install`` builds a session's subagents from the factories a composition root gives it,
without the runtime naming one: reflection is hooked after turns (with the session's ``idle_wait``), the merge resolver is built
only under D3's ``resolve`` policy, and the empty set installs nothing."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest

from orchestrator.agent.context import SessionContext
from orchestrator.agent.turn import TurnOutcome, TurnRunner
from orchestrator.base.events import Event
from orchestrator.memfs.resolution import Conflict, Resolver
from orchestrator.models.types import ModelClient
from orchestrator.runtime.plugins import Installed, Plugins, Spawner
from orchestrator.runtime.runtime import Runtime
from orchestrator.runtime.supervisor import Supervisor

pytestmark = pytest.mark.anyio


class Reflection:
    """A reflector that records what reached it."""

    def __init__(
        self,
        *,
        context: SessionContext,
        supervisor: Spawner,
        resolver: Resolver | None,
        idle_wait: Callable[[float], Awaitable[None]],
    ) -> None:
        self.context, self.supervisor, self.resolver, self.idle_wait = context, supervisor, resolver, idle_wait
        self.turns: list[TurnOutcome] = []
        self.active = False

    async def after_turn(self, runner: TurnRunner, outcome: TurnOutcome) -> None:
        self.turns.append(outcome)

    async def on_event(self, event: Event, conversation_id: str | None) -> None:
        pass

    async def maybe_launch(self, conversation_id: str, *, manual: bool = False) -> str:
        return "recorded"

    async def idle(self, conversation_id: str, seconds: float) -> str | None:
        return None


async def _idle_wait(seconds: float) -> None:
    """The session's way of waiting out an idle spell, as a test would give it."""


def _resolver(*, context: SessionContext, model: ModelClient) -> Resolver:
    async def resolve(conflict: Conflict) -> None:
        pass

    return resolve


async def _install(tmp_path: Path, plugins: Plugins, merge: str) -> tuple[Installed, Supervisor, Any]:
    async with Runtime.open(workspace=tmp_path, cli={"reflection_merge": merge}) as rt:
        agent, settings = await rt.agent_with_settings("p", {"reflection_merge": merge})
        context = SessionContext(store=rt.store, model=rt.model, settings=settings, agent=agent)
        async with Supervisor.open(rt.store) as supervisor:
            installed = plugins.install(
                context=context, supervisor=supervisor, resolver_model=rt.model, idle_wait=_idle_wait
            )
            return installed, supervisor, context


async def test_reflection_is_hooked_after_turns_with_the_resolver_of_the_resolve_policy(tmp_path: Path) -> None:
    plugins = Plugins(reflection=Reflection, resolver=_resolver)
    installed, supervisor, context = await _install(tmp_path, plugins, "resolve")
    reflection = installed.reflection
    assert isinstance(reflection, Reflection) and installed.compactor is None
    assert reflection.context is context and reflection.supervisor is supervisor and reflection.resolver is not None
    assert reflection.idle_wait is _idle_wait
    assert supervisor.after_turn_hooks == [reflection.after_turn]
    kept, _, _ = await _install(tmp_path, plugins, "keep")
    assert isinstance(kept.reflection, Reflection) and kept.reflection.resolver is None


async def test_the_empty_set_installs_no_subagent(tmp_path: Path) -> None:
    installed, supervisor, _ = await _install(tmp_path, Plugins(), "resolve")
    assert installed == Installed() and supervisor.after_turn_hooks == []

"""A chat session: one agent, one conversation, the runtime around it, and the supervisor that owns
every task the session starts (DECISIONS S23 for one-shot runs).

The CLI, the batch runner and tests drive agents through this class so they all get the same
turn lock, compaction, post-turn sync and reflection triggers. This is the composition root of D9:
the one place that names the subagents and plugs them into the runtime (``REVERIE_PLUGINS``).
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable, Mapping
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from orchestrator.agent.turn import AgentProfile, Compactor, Observer, TurnOutcome, TurnRunner
from orchestrator.base.config import Settings
from orchestrator.base.events import Event, ModelRetrying
from orchestrator.models.types import ModelClient
from orchestrator.runtime.plugins import Plugins
from orchestrator.runtime.runtime import Runtime
from orchestrator.runtime.supervisor import Supervisor
from subagents.compaction import CompactionSubagent
from subagents.reflection import ReflectionCoordinator, recover_reflections

__all__ = ["REVERIE_PLUGINS", "ChatSession"]

REVERIE_PLUGINS = Plugins(recovery=(recover_reflections,), compactor=CompactionSubagent)
"""Reverie's subagents as the runtime sees them: reflection's start-up recovery (R6) and compaction."""


@dataclass
class ChatSession:
    runtime: Runtime
    agent: AgentProfile
    conversation_id: str
    runner: TurnRunner
    supervisor: Supervisor
    reflection: ReflectionCoordinator

    @classmethod
    @asynccontextmanager
    async def open(
        cls,
        *,
        agent_id: str,
        conversation_id: str | None = None,
        new: bool = False,
        cli: Mapping[str, Any] | None = None,
        observer: Observer | None = None,
        model: ModelClient | None = None,
        workspace: Path | None = None,
        store_path: Path | None = None,
    ) -> AsyncIterator[ChatSession]:
        async with Runtime.open(
            cli=cli, model=model, workspace=workspace, store_path=store_path, plugins=REVERIE_PLUGINS
        ) as rt:
            agent = await rt.agent(agent_id)
            settings = await rt.agent_settings(agent_id, cli)
            conv = await rt.conversation(agent, conversation_id=conversation_id, new=new)
            async with Supervisor.open(rt.store, observer=observer) as supervisor:
                reflection = ReflectionCoordinator(
                    store=rt.store, model=rt.model, settings=settings, agent=agent, supervisor=supervisor, observer=observer
                )

                async def observe(event: Event) -> None:
                    if observer is not None:
                        await observer(event)
                    await reflection.on_event(event, conv.id)

                supervisor.after_turn_hooks.append(reflection.after_turn)
                if observer is not None and hasattr(rt.model, "on_retry"):

                    async def retrying(message: str) -> None:
                        await observer(ModelRetrying(message))

                    rt.model.on_retry = retrying
                runner = TurnRunner(
                    store=rt.store,
                    model=rt.model,
                    settings=settings,
                    agent=agent,
                    workspace=rt.workspace,
                    observer=observe,
                    compactor=_compactor(rt, agent, settings, observe, supervisor),
                )
                yield cls(rt.with_settings(settings), agent, conv.id, runner, supervisor, reflection)

    async def send(self, text: str) -> TurnOutcome:
        """Run one turn (serialized per conversation) and let the supervisor react to it."""
        return await self.supervisor.run_turn(self.runner, self.conversation_id, text)

    async def reflect_now(self) -> str:
        """A manual reflection (``reverie reflect``): ignores the trigger and any failure pause."""
        return await self.reflection.maybe_launch(self.conversation_id, manual=True)

    async def finish_one_shot(self, notify: Callable[[str], None] | None = None) -> bool:
        """S23: a one-shot run waits up to 30 s for the subagents it launched, telling ``notify``
        what it waits for; what is still running then is left to start-up recovery (R6)."""
        count = self.supervisor.running
        if count and notify is not None:
            notify(f"… waiting up to 30 s for {count} background subagent{'s' if count != 1 else ''} (reflection, compaction)")
        finished = await self.supervisor.drain(30.0)
        if not finished and notify is not None:
            notify("… left unfinished subagent work to start-up recovery: nothing is lost")
        return finished


def _compactor(
    rt: Runtime, agent: AgentProfile, settings: Settings, observer: Observer, supervisor: Supervisor
) -> Compactor | None:
    factory = rt.plugins.compactor
    if factory is None:
        return None
    return factory(store=rt.store, model=rt.model, settings=settings, agent=agent, observer=observer, supervisor=supervisor)

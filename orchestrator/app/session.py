"""A chat session: one agent, one conversation, the runtime around it, and the supervisor that owns
every task the session starts (S23 for one-shot runs).

The CLI, the batch runner, the library (``orchestrator.api``) and tests drive agents through this
class so they all get the same turn lock, compaction, post-turn sync and reflection triggers, and
what a user can ask of a session (compact now, reflect now, what it used and cost) is one method
here that every front end calls. This is the composition root of D9: the one place that names the
subagents (``REVERIE_PLUGINS``); the runtime installs them through ``orchestrator.runtime.plugins``.
What the chat's slash commands change (a new conversation, the agent's name, the model) is changed
here, so the turn runner, reflection and the next turn's reminders all see it.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from contextlib import asynccontextmanager
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, Any

import anyio

from orchestrator.agent.budget import Meter
from orchestrator.agent.context import AgentProfile, SessionContext
from orchestrator.agent.turn import Observer, TurnOutcome, TurnRunner
from orchestrator.app.memory_events import MemoryTracker
from orchestrator.app.telemetry import Telemetry, open_telemetry
from orchestrator.app.usage import Tally, UsageSplit, cost_usd, usage_split
from orchestrator.base import blocking
from orchestrator.base.config import Settings
from orchestrator.base.errors import UsageError
from orchestrator.base.events import Event, ModelCalled, ModelRetrying, Publisher
from orchestrator.base.limits import Prices, limits_for
from orchestrator.compaction.result import CompactionResult
from orchestrator.compaction.settings import CompactionMode
from orchestrator.compaction.tokens import (
    context_size,
    system_prompt_tokens,
    tool_schema_tokens,
    usage_tokens,
)
from orchestrator.memfs.repo import head_revision
from orchestrator.models.metered import MeteredModel
from orchestrator.models.types import ModelClient, Usage
from orchestrator.runtime.plugins import Installed, Plugins, Reflector, SessionCompactor
from orchestrator.runtime.runtime import Runtime
from orchestrator.runtime.supervisor import Running, Supervisor
from orchestrator.store import Turn
from subagents.compaction import CompactionSubagent
from subagents.reflection import ReflectionCoordinator, recover_reflections

if TYPE_CHECKING:
    from orchestrator.memfs.resolution import Conflict, Resolver

__all__ = ["REVERIE_PLUGINS", "ChatSession", "ContextUse"]


def _merge_resolver(*, context: SessionContext, model: ModelClient) -> Resolver:
    """The resolver subagent as a ``ResolverFactory``, its module imported on the first conflict it
    is given: a chat that never meets one never imports it (nor merge resolution) before its first
    request (P1). Each conflict is resolved under its own ``[limits] resolver_*`` (B1). Installed
    for ``resolve`` and for ``review`` (V1: the one a person's merge of a held branch uses)."""

    async def resolve(conflict: Conflict) -> None:
        # deferred: see the docstring
        from subagents.resolver import resolver_for_session

        await resolver_for_session(context=context, model=model)(conflict)

    return resolve


REVERIE_PLUGINS = Plugins(
    recovery=(recover_reflections,),
    compactor=CompactionSubagent,
    reflection=ReflectionCoordinator,
    resolver=_merge_resolver,
)
"""Reverie's subagents as the runtime sees them: reflection (its start-up recovery, R6, and its
coordinator), compaction and the merge resolver."""


@dataclass(frozen=True)
class ContextUse:
    """How full the conversation's context is (C8: the provider's last usage when it is
    fresh, else the estimate)."""

    tokens: int
    window: int
    source: str


@dataclass
class ChatSession:
    """An open session; ``open`` builds it and owns everything it starts.

    Its live state (settings, agent, model, observer) is ``context``, shared by reference with the
    turn runner, reflection and compaction: ``set_model``, ``rename`` and ``describe`` change it
    there once and every part reads the new value from its next use on.
    """

    runtime: Runtime
    context: SessionContext
    conversation_id: str
    runner: TurnRunner
    supervisor: Supervisor
    reflection: Reflector | None = None
    compactor: SessionCompactor | None = None
    usage_mark: int = 0
    """The store's last event id when the session opened: its usage is what came after."""

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
        suite: Mapping[str, Any] | None = None,
        config_file: Path | None = None,
        idle_wait: Callable[[float], Awaitable[None]] = anyio.sleep,
    ) -> AsyncIterator[ChatSession]:
        """``idle_wait`` is how the session waits out an idle spell between turns (a trigger may
        ask for one, ``subagents.triggers``); tests give one that waits on their event."""
        async with Runtime.open(
            cli=cli,
            model=model,
            workspace=workspace,
            store_path=store_path,
            plugins=REVERIE_PLUGINS,
            suite=suite,
            config_file=config_file,
        ) as rt:
            agent, settings = await rt.agent_with_settings(agent_id, cli)
            conv = await rt.conversation(agent, conversation_id=conversation_id, new=new)
            current = {"conversation": conv.id, "model": settings.model}
            telemetry = open_telemetry(
                agent.name,
                provider="openai" if settings.uses_endpoint else "reverie.scripted",
                request_model=lambda: current["model"],
                conversation=lambda: current["conversation"],
            )
            model = telemetry.model(rt.model) if telemetry is not None else rt.model
            shown = _observed(observer, telemetry)

            async def resolver_call(event: ModelCalled) -> None:
                await Publisher(rt.store, agent.agent_id, shown)(event, current["conversation"])

            async with Supervisor.open(
                rt.store, observer=shown, capacity=settings.max_subagents,
                process_capacity_total=settings.max_process_subagents,
            ) as supervisor:
                installed: list[Installed] = []
                tracker: MemoryTracker | None = None

                async def observe(event: Event) -> None:
                    if shown is not None:
                        await shown(event)
                    if installed and installed[0].reflection is not None:
                        await installed[0].reflection.on_event(event, current["conversation"])
                    if tracker is not None:
                        await tracker(event)

                meter = Meter(limits_for(settings, "session"), Prices.of(settings))
                context = SessionContext(
                    store=rt.store, model=model, settings=settings, agent=agent, observer=observe, meter=meter
                )
                tracker = MemoryTracker(agent.memory_dir, lambda event: context.publish(event, current["conversation"]))
                if telemetry is not None:
                    telemetry.memory_store = str(agent.memory_dir)
                plugins = rt.plugins.install(
                    context=context,
                    supervisor=supervisor,
                    resolver_model=MeteredModel(model, resolver_call),
                    idle_wait=idle_wait,
                )
                installed.append(plugins)
                if observer is not None and hasattr(rt.model, "on_retry"):

                    async def retrying(message: str) -> None:
                        await observer(ModelRetrying(message))

                    rt.model.on_retry = retrying
                if plugins.reflection is not None:
                    # L2: spawned, so a one-shot's S23 wait covers the look-up and the relaunch it starts
                    supervisor.spawn("reflection relaunch", plugins.reflection.relaunch_interrupted)
                runner = TurnRunner(context=context, workspace=rt.workspace, compactor=plugins.compactor)
                mark = await rt.store.last_event_id()
                session = cls(rt, context, conv.id, runner, supervisor, plugins.reflection, plugins.compactor, mark)
                session._current = current
                try:
                    yield session
                finally:
                    with anyio.CancelScope(shield=True):
                        if plugins.compactor is not None:
                            # every compaction.start has its end, a summary prepared and never applied too
                            await plugins.compactor.close()
                        if telemetry is not None:
                            await telemetry.close()

    _current: dict[str, str] | None = None

    @property
    def resolver(self) -> Resolver | None:
        """The session's merge resolver (``None`` under ``keep``, or without reflection)."""
        return self.reflection.resolver if self.reflection is not None else None

    def _switch(self, conversation_id: str) -> None:
        self.conversation_id = conversation_id
        if self._current is not None:
            self._current["conversation"] = conversation_id

    async def send(self, text: str) -> TurnOutcome:
        """Run one turn (serialized per conversation) and let the supervisor react to it."""
        return await self.supervisor.run_turn(self.runner, self.conversation_id, text)

    async def replay(self, user: str, assistant: str, *, at: str | None = None) -> TurnOutcome:
        """One recorded exchange as a turn of this conversation: the assistant's line is given back
        instead of a model call, everything else (steps, context, compaction, the post-turn sync,
        reflection triggers) runs as live (``orchestrator.agent.replay``). ``at`` dates both messages."""
        return await self.supervisor.run_turn(self.runner, self.conversation_id, user, at=at, recorded=assistant)

    async def idle(self, seconds: float) -> str | None:
        """The conversation has been idle ``seconds`` (a replayed history's gap between recorded
        sessions): the reflection trigger is asked, as after a live idle spell (``idle_wait``)."""
        if self.reflection is None:
            return None
        return await self.reflection.idle(self.conversation_id, seconds)

    async def reflect_now(self) -> str:
        """A manual reflection (``reverie reflect``, ``/reflect``, ``Session.reflect``): ignores the
        trigger and any failure pause; returns why it started or did not."""
        if self.reflection is None:
            raise UsageError("reflection is not available in this session")
        return await self.reflection.maybe_launch(self.conversation_id, manual=True)

    async def compact(self, *, mode: CompactionMode | None = None) -> CompactionResult:
        """A manual compaction of the conversation (``reverie compact``, ``/compact``,
        ``Session.compact``), between turns: it waits for the conversation's turn lock, so the
        summary and the recompiled prompt are what a turn would produce (COMPACTION-1.3)."""
        if self.compactor is None:
            raise UsageError("compaction is not available in this session")
        async with self.supervisor.conversation_lock(self.conversation_id):
            return await self.compactor.compact_now(self.conversation_id, mode=mode)

    async def usage(self, *, conversation: bool = False, after_id: int | None = None) -> UsageSplit:
        """The model calls this session made (its turns' and its subagents'), from the store's
        ``model.call`` events after ``usage_mark`` (or ``after_id``); ``conversation=True``: every
        call of the current conversation, whichever process made it."""
        store, agent_id = self.runtime.store, self.agent.agent_id
        if conversation:
            return await usage_split(store, agent_id, conversation_id=self.conversation_id)
        return await usage_split(store, agent_id, after_id=self.usage_mark if after_id is None else after_id)

    def cost(self, tally: Tally) -> float | None:
        """USD for ``tally`` at the session's prices (``[model] price_in, price_out``); None unpriced."""
        return cost_usd(tally.prompt_tokens, tally.completion_tokens, self.settings.price_in, self.settings.price_out)

    async def finish_one_shot(self, notify: Callable[[str], None] | None = None) -> bool:
        """S23: a one-shot run waits up to 30 s for the subagents it launched, telling ``notify``
        what it waits for; a reflection still running then is recorded ``interrupted`` as the session
        closes, and the agent's next session merges its commits or relaunches it (L2)."""
        count = self.supervisor.running
        if count and notify is not None:
            notify(f"… waiting up to 30 s for {count} background subagent{'s' if count != 1 else ''} (reflection, compaction)")
        finished = await self.supervisor.drain(30.0)
        if not finished and notify is not None:
            notify("… left unfinished subagent work for the next session (recorded interrupted): nothing is lost")
        return finished

    async def leave(self, show: Callable[[list[Running]], None], stop: anyio.Event) -> bool:
        """Leaving an interactive session (L2): wait for the subagents still running, each at most
        for the rest of its time limit, with ``show`` told what runs once a second; True when all
        finished. When ``stop`` is set first (Ctrl-C) the session's end records what still runs
        ``interrupted``, its commits kept, and the agent's next session takes it up."""
        return await self.supervisor.wait_out(show, stop)

    async def last_turn(self) -> Turn | None:
        """The conversation's newest turn as stored (an interrupted turn has no outcome object)."""
        turns = await self.runtime.store.turns(self.conversation_id)
        return turns[-1] if turns else None

    async def new_conversation(self) -> str:
        conv = await self.runtime.conversation(self.agent, new=True)
        self._switch(conv.id)
        return conv.id

    async def resume_conversation(self, conversation_id: str) -> str:
        """Switch to another of this agent's conversations (checked like ``--conversation``)."""
        conv = await self.runtime.conversation(self.agent, conversation_id=conversation_id)
        self._switch(conv.id)
        return conv.id

    @property
    def agent(self) -> AgentProfile:
        return self.context.agent

    @property
    def settings(self) -> Settings:
        return self.context.settings

    async def rename(self, name: str) -> None:
        """The agent-info reminder tells the model the user can do this (D7)."""
        await self.runtime.store.update_agent(self.agent.agent_id, name=name)
        self.context.set_agent(name=name)

    async def describe(self, description: str) -> None:
        """The agent-info reminder says the user can change the description with /description."""
        await self.runtime.store.update_agent(self.agent.agent_id, settings={"description": description})
        self.context.set_agent(description=description)

    @property
    def model_name(self) -> str:
        return self.context.settings.model

    async def set_model(self, name: str) -> None:
        """Use ``name`` from the next request on (the turn's, reflection's and compaction's), and
        remember it as the agent's setting."""
        if self._current is not None:
            self._current["model"] = name
        await self.runtime.store.update_agent(self.agent.agent_id, settings={"model": name})
        self.context.set_model(name)

    async def context_use(self) -> ContextUse:
        """C8's figure: the provider's last usage while it is fresh, plus the messages since. Without
        one (before a conversation's first request, after a compaction) it is the estimate of the
        request the next turn would send, user's words aside, built by the turn runner's own code."""
        store = self.runtime.store
        history = await store.in_context(self.conversation_id)
        messages = [m.message for m in history]
        summary_at = max((m.created_at for m in history if m.message.kind == "summary"), default="")
        usage_index: int | None = None
        usage: Usage | None = None
        for index in range(len(history) - 1, -1, -1):
            stored = history[index]
            reported = stored.metadata.get("usage") if stored.message.role == "assistant" else None
            if isinstance(reported, dict) and stored.created_at > summary_at:
                usage_index = index
                usage = Usage(int(reported.get("prompt_tokens", 0)), int(reported.get("completion_tokens", 0)))
                break
        if usage_index is None or usage_tokens(usage) == 0:
            request = await self.runner.next_request(self.conversation_id)
            size = context_size(
                request.messages,
                system_prompt_tokens=system_prompt_tokens(request.system),
                tool_tokens=tool_schema_tokens(request.tools),
            )
        else:
            size = context_size(messages, system_prompt_tokens=0, tool_tokens=0, usage=usage, usage_index=usage_index)
        return ContextUse(size.tokens, self.context.settings.context_window, size.source)

    async def memory_head(self) -> str | None:
        return await blocking.run_sync("git", partial(head_revision, self.agent.memory_dir))


def _observed(observer: Observer | None, telemetry: Telemetry | None) -> Observer | None:
    """The caller's observer, with the session's telemetry seeing every event first."""
    if telemetry is None:
        return observer
    if observer is None:
        return telemetry
    user = observer

    async def both(event: Event) -> None:
        await telemetry(event)
        await user(event)

    return both

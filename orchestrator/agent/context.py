"""A session's live state, held once: the store, the model, the settings, the agent and the observer.

The turn runner, reflection and compaction all act for the same agent in the same session, and the
chat changes that state while it runs (``/model``, ``/rename``, ``/description``). When each part
kept its own copy, the session had to update every copy by hand, and one was missed: after a model
switch compaction kept summarising with the old model. As httpx keeps a client's state once on the
``Client`` and every request reads it there, each part now holds a reference to one
``SessionContext`` and reads the current value at the moment it needs it; a change is one
assignment, seen by every part from its next read on.

The context is deliberately mutable and not shared across sessions: it is the one place a session's
state changes. The values it holds (``Settings``, ``AgentProfile``) stay frozen; changing one means
replacing it here.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from pathlib import Path

from orchestrator.agent.budget import Meter
from orchestrator.base.config import Settings
from orchestrator.base.events import Event, Observer, Publisher, ignore_event
from orchestrator.models.types import ModelClient
from orchestrator.store import Store

__all__ = ["AgentProfile", "ReadsSessionContext", "SessionContext"]


@dataclass(frozen=True)
class AgentProfile:
    """What a turn needs to know about its agent."""

    agent_id: str
    name: str
    memory_dir: Path
    raw_system: str
    description: str | None = None


@dataclass(eq=False)
class SessionContext:
    """The one holder of a session's live state (see the module docstring)."""

    store: Store
    model: ModelClient
    settings: Settings
    agent: AgentProfile
    observer: Observer = ignore_event
    meter: Meter | None = None
    """The session's spend against ``[limits] session_*`` (B1): every turn's and subagent launch's
    meter charges it too. ``None``: nothing is metered (a library caller's bare context)."""

    async def publish(self, event: Event, conversation_id: str | None) -> None:
        """Record ``event`` (unless transient), then show it: the one way every part publishes."""
        await Publisher(self.store, self.agent.agent_id, self.observer)(event, conversation_id)

    def set_model(self, name: str) -> None:
        """Every part's next request names ``name``."""
        self.settings = self.settings.with_value("model", name, "set_model")

    def set_agent(self, *, name: str | None = None, description: str | None = None) -> None:
        """A rename or a new description, seen by every part from its next read."""
        agent = self.agent
        self.agent = replace(
            agent,
            name=agent.name if name is None else name,
            description=agent.description if description is None else description,
        )


class ReadsSessionContext:
    """The session's live state read through ``self.context`` at every use, never copied: the turn
    runner, reflection and compaction all see one ``set_model`` or rename at once."""

    context: SessionContext

    @property
    def store(self) -> Store:
        return self.context.store

    @property
    def model(self) -> ModelClient:
        return self.context.model

    @property
    def settings(self) -> Settings:
        return self.context.settings

    @property
    def agent(self) -> AgentProfile:
        return self.context.agent

    @property
    def observer(self) -> Observer:
        return self.context.observer

"""One process's view of reverie: settings, the store, the model, and the agents it serves.

``Runtime.open()`` is the single place where configuration is resolved and resources are created,
so the CLI, the batch runner and tests build the same world the same way; nothing is global. What
subagents add at start-up (recovery) comes in as ``Plugins`` from the composition root, so the runtime
never imports ``subagents`` (D9).
"""

from __future__ import annotations

import os
from collections.abc import AsyncIterator, Mapping
from contextlib import asynccontextmanager
from dataclasses import dataclass, field, replace
from functools import partial
from pathlib import Path
from typing import Any

from orchestrator.agent.context import AgentProfile
from orchestrator.base import blocking
from orchestrator.base.config import SETTING_NAMES, Settings, load_settings
from orchestrator.base.errors import UsageError
from orchestrator.base.events import MemoryWarning
from orchestrator.base.paths import agent_memory_dir, check_agent_id
from orchestrator.memfs.gitdir import is_repository
from orchestrator.memfs.guard import drain_findings
from orchestrator.memfs.repo import init_memory_repo
from orchestrator.models.types import ModelClient
from orchestrator.runtime.plugins import Plugins
from orchestrator.store import Agent, Conversation, Store, StoreError
from orchestrator.tools.overflow import cleanup_overflow_files
from prompts import load_prompt

__all__ = ["Runtime", "build_model"]


def build_model(settings: Settings) -> ModelClient:
    """The OpenAI-compatible client when an endpoint is configured, else the scripted model."""
    if settings.base_url:
        # lazy: the OpenAI SDK takes over a second to import; the scripted model needs none of it
        from orchestrator.models.openai_client import model_from_settings

        return model_from_settings(
            settings.base_url,
            settings.api_key,
            settings.model if "model" in settings.sources else "",
            idle_timeout=settings.stream_idle_timeout,
            request_timeout=settings.request_timeout,
            max_response_chars=settings.max_response_chars,
            max_attempts=settings.model_attempts,
        )
    # lazy: the real path does not need the scripted model's ~10 ms of dataclasses and patterns
    from orchestrator.models.scripted import ScriptedModel, latency_from_env

    return ScriptedModel(latency=latency_from_env(os.environ))


def _settings_and_cleanup(*, cli: Mapping[str, Any] | None, agent: Mapping[str, Any], path: Path | None) -> Settings:
    """Both blocking steps of opening in one worker-thread hop (a batch opens a runtime per task)."""
    settings = load_settings(cli=cli, agent=agent, path=path)
    cleanup_overflow_files()  # COMPACTION-7.5: older than 24 h
    return settings


@dataclass
class Runtime:
    """Settings, store and model of one process, and the agents it has loaded.

    ``open`` owns the store's life (closed on exit). ``plugins.recovery`` runs once per agent per
    process, when ``agent`` first loads it with ``create=True``; read-only lookups never recover.
    """

    settings: Settings
    store: Store
    model: ModelClient
    workspace: Path
    plugins: Plugins = field(default_factory=Plugins)
    _recovered: set[str] = field(default_factory=set)
    _suite: Mapping[str, Any] = field(default_factory=dict)
    _config_file: Path | None = None

    @classmethod
    @asynccontextmanager
    async def open(
        cls,
        *,
        cli: Mapping[str, Any] | None = None,
        store_path: Path | None = None,
        model: ModelClient | None = None,
        workspace: Path | None = None,
        plugins: Plugins | None = None,
        suite: Mapping[str, Any] | None = None,
        config_file: Path | None = None,
    ) -> AsyncIterator[Runtime]:
        """``suite`` (a batch task's settings) ranks between the config file and the environment;
        ``config_file`` replaces ``$REVERIE_HOME/config.toml`` (a batch task's home is the run's, the
        user's config is read from where the command started, D15)."""
        suite = dict(suite or {})
        settings = await blocking.run_sync("files", partial(_settings_and_cleanup, cli=cli, agent=suite, path=config_file))
        async with Store.opened(store_path) as store:
            yield cls(
                settings=settings,
                store=store,
                model=model or build_model(settings),
                workspace=workspace or Path.cwd(),
                plugins=plugins or Plugins(),
                _suite=suite,
                _config_file=config_file,
            )

    async def agent(self, agent_id: str, *, create: bool = True) -> AgentProfile:
        """The agent's profile; its memory repository is created on first use (v2 layout)."""
        return (await self._agent(agent_id, create=create))[0]

    async def agent_with_settings(
        self, agent_id: str, cli: Mapping[str, Any] | None = None
    ) -> tuple[AgentProfile, Settings]:
        """``agent(agent_id)`` and ``agent_settings(agent_id, cli)`` from the one agent row that
        loading it read (a batch opens a session per task: one store round trip fewer each)."""
        profile, record = await self._agent(agent_id, create=True)
        return profile, await self._settings_for(record, cli)

    async def _agent(self, agent_id: str, *, create: bool) -> tuple[AgentProfile, Agent]:
        check_agent_id(agent_id)
        memory_dir = agent_memory_dir(agent_id)
        if create:
            await blocking.run_sync("git", partial(init_memory_repo, memory_dir))
        if create:
            record = await self.store.ensure_agent(agent_id)
            for finding in drain_findings(memory_dir):
                await self.store.record_event(MemoryWarning.kind, MemoryWarning(finding.message).payload(), agent_id=agent_id)
        else:
            found = await self.store.get_agent(agent_id)
            if found is None:
                # `reverie memory init` makes an agent without touching the store
                if not await blocking.run_sync("files", partial(is_repository, memory_dir)):
                    raise StoreError(f"no agent {agent_id!r}; `reverie chat --agent {agent_id}` creates it")
                found = await self.store.ensure_agent(agent_id)
            record = found
        if create and agent_id not in self._recovered:
            self._recovered.add(agent_id)
            for recover in self.plugins.recovery:
                await recover(self.store, agent_id, memory_dir)
        raw_system = str(record.settings.get("system_prompt") or load_prompt("system"))
        profile = AgentProfile(
            agent_id=agent_id,
            name=record.name,
            memory_dir=memory_dir,
            raw_system=raw_system,
            description=record.settings.get("description"),
        )
        return profile, record

    async def agent_settings(self, agent_id: str, cli: Mapping[str, Any] | None = None) -> Settings:
        """Settings with this agent's stored overrides applied under the CLI and environment."""
        return await self._settings_for(await self.store.get_agent(agent_id), cli)

    async def _settings_for(self, record: Agent | None, cli: Mapping[str, Any] | None) -> Settings:
        stored = {k: v for k, v in (record.settings if record else {}).items() if k in SETTING_NAMES}
        if not stored:
            return self.settings
        return await blocking.run_sync("files", partial(load_settings, cli=cli, agent={**self._suite, **stored}, path=self._config_file))

    async def conversation(
        self, agent: AgentProfile, *, conversation_id: str | None = None, new: bool = False
    ) -> Conversation:
        """``--conversation`` names one (it must belong to the agent); ``--new`` starts one; otherwise
        the agent's most recent conversation, created if there is none."""
        if conversation_id and new:
            raise UsageError("--conversation and --new cannot be used together")
        if conversation_id:
            conv = await self.store.get_conversation(conversation_id) or await self._by_prefix(agent, conversation_id)
            if conv.agent_id != agent.agent_id:
                raise StoreError(f"conversation {conversation_id!r} belongs to agent {conv.agent_id!r}, not {agent.agent_id!r}")
            return conv
        if not new:
            latest = await self.store.latest_conversation(agent.agent_id)
            if latest is not None:
                return latest
        return await self.store.create_conversation(agent.agent_id)

    async def _by_prefix(self, agent: AgentProfile, prefix: str) -> Conversation:
        """An id abbreviated to a unique prefix of one of the agent's conversations (as git's short ids)."""
        found = await self.store.conversation_by_prefix(agent.agent_id, prefix)
        if len(found) == 1:
            return found[0]
        if not found:
            raise StoreError(f"no conversation {prefix!r}; see `reverie history --list`")
        shown = ", ".join(c.id[: len(prefix) + 4] + "…" for c in found[:5])
        raise StoreError(f"conversation {prefix!r} is ambiguous: {len(found)} conversations start so ({shown}); give more of the id")

    def with_settings(self, settings: Settings) -> Runtime:
        return replace(self, settings=settings)

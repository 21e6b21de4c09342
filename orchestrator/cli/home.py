"""``reverie config`` and ``reverie agents``: what this home holds and which settings are in effect.

An agent exists when the store knows it (``chat`` made it) or when its memory repository does
(``memory init`` makes one without touching the store); both kinds are listed, each with its
memory ``HEAD`` and its last activity (its newest message, else its newest memory commit).
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from datetime import UTC, datetime
from functools import partial
from pathlib import Path
from typing import Annotated, Any

import typer

from orchestrator.base import blocking
from orchestrator.base.config import SETTING_NAMES, Flags, load_settings
from orchestrator.base.errors import UsageError
from orchestrator.base.paths import check_agent_id, config_path, reverie_home, store_path
from orchestrator.cli.aio import run_async
from orchestrator.cli.listing import short_time
from orchestrator.cli.options import ContextWindowOption
from orchestrator.memfs.errors import GitError
from orchestrator.memfs.git import GitRepo
from orchestrator.memfs.gitdir import is_repository
from orchestrator.store import Store

__all__ = ["AgentRow", "agent_rows", "agents", "config", "known_agents_on_disk", "register"]

_COMMITTER = re.compile(rb"^committer .* (\d+) [+-]\d{4}$", re.MULTILINE)


@dataclass(frozen=True)
class AgentRow:
    """One line of ``reverie agents``."""

    agent_id: str
    name: str | None
    head: str | None
    last_activity: str | None
    in_store: bool


def known_agents_on_disk(home: Path | None = None) -> list[str]:
    """Agents with a memory repository in this home (``memory init`` makes them). Blocking."""
    root = (home or reverie_home()) / "agents"
    if not root.is_dir():
        return []
    return sorted(p.name for p in root.iterdir() if _valid_id(p.name) and is_repository(p / "memory"))


def _valid_id(name: str) -> bool:
    try:
        check_agent_id(name)
    except UsageError:
        return False
    return True


def _head_and_time(memory: Path) -> tuple[str | None, str | None]:
    try:
        with GitRepo(memory).open() as local:
            head = None if local is None else local.head()
            raw = local.read(head) if local is not None and head else None
    except GitError:
        return "(damaged)", None
    when = None
    if raw is not None:
        found = _COMMITTER.search(raw[1])
        if found:
            when = datetime.fromtimestamp(int(found.group(1)), UTC).isoformat()
    return head, when


async def agent_rows() -> list[AgentRow]:
    """Every agent of this home, by id."""

    on_disk = await blocking.run_sync("files", known_agents_on_disk)
    stored: dict[str, tuple[str, str | None]] = {}
    if await blocking.run_sync("files", store_path().exists):
        async with Store.opened() as store:
            for agent in await store.list_agents():
                stored[agent.id] = (agent.name, await store.last_message_at(agent.id))
    rows = []
    for agent_id in sorted(set(on_disk) | set(stored)):
        memory = reverie_home() / "agents" / agent_id / "memory"
        head, committed = await blocking.run_sync("git", partial(_head_and_time, memory))
        name, spoke = stored.get(agent_id, (None, None))
        last = max((t for t in (spoke, committed) if t), default=None)
        rows.append(AgentRow(agent_id, name, head, last, agent_id in stored))
    return rows


def agents() -> None:
    """List every agent of this home (made by chat or by memory init) with its memory HEAD and last activity."""
    rows = run_async(agent_rows)
    if not rows:
        print(f"no agents yet in {reverie_home()}; `reverie chat --agent NAME` creates one")
        return
    width = max(len(r.agent_id) for r in rows)
    for r in rows:
        head = (r.head or "no commits")[:10]
        name = f"  ({r.name})" if r.name and r.name != r.agent_id else ""
        origin = "" if r.in_store else "  (memory only: made by memory init)"
        print(f"{r.agent_id.ljust(width)}  HEAD {head:<10}  last {short_time(r.last_activity)}{name}{origin}")


def config(
    model: Annotated[str | None, typer.Option("--model", "-m", help="As chat's --model: shows its effect.")] = None,
    context_window: ContextWindowOption = None,
    agent: Annotated[
        str | None, typer.Option("--agent", "-a", help="Include this agent's own settings (/model, set_model).")
    ] = None,
    as_json: Annotated[bool, typer.Option("--json", help="One JSON object: key -> {value, source}, typed.")] = False,
) -> None:
    """Print the effective settings and where each came from (flag > environment > agent > config file > default)."""
    stored = run_async(partial(_agent_settings, agent)) if agent is not None else None
    settings = load_settings(cli=Flags(model=model, context_window=context_window), agent=stored, path=config_path())
    if as_json:
        rows = settings.explain(typed=True)
        print(json.dumps({k: {"value": v, "source": s} for k, v, s in rows}, indent=2))
        return
    rows = settings.explain()
    where = f"   agent {agent}" if agent is not None else ""
    print(f"home {reverie_home()}   config file {config_path()}{'' if config_path().is_file() else ' (none)'}{where}")
    width = max(len(k) for k, _, _ in rows)
    for key, value, source in rows:
        print(f"{key.ljust(width)}  {value}   ({source})")


async def _agent_settings(agent_id: str) -> dict[str, Any]:
    """The settings stored on ``agent_id`` (what ``/model`` and ``set_model`` keep), as a session
    loads them; an agent this home does not know is one line."""

    check_agent_id(agent_id)
    record = None
    if await blocking.run_sync("files", store_path().exists):
        async with Store.opened() as store:
            record = await store.get_agent(agent_id)
    if record is None:
        if agent_id in await blocking.run_sync("files", known_agents_on_disk):
            return {}
        raise UsageError(f"no agent {agent_id!r} in {reverie_home()} (`reverie agents` lists them)")
    return {k: v for k, v in record.settings.items() if k in SETTING_NAMES}


def register(app: Any) -> None:
    app.command("config")(config)
    app.command("agents")(agents)

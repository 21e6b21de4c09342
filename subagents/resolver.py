"""The merge resolver subagent (D3): reconciles a rebase conflict of merge-back.

A memory-profile subagent with no subagents of its own: a short tool loop (``bash``, file tools)
confined to the branch's worktree, which is stopped inside the rebase. The request holds
``prompts/resolver.md`` (its rules, plus the user's ``[reflection] merge_instructions``) and every
conflicting file as a ``<conflict path="...">`` block with the ``HEAD`` side and the branch's side
(stages 2 and 3 of the index). The harness (``orchestrator.memfs.resolution``) checks what it did:
nothing left conflicted, no markers, linear history containing HEAD, the audit, the rebase's own
state unchanged (``memfs.operations``) and the parent's branch where the main agent and reverie left
it (``memfs.parent``: one the resolver moved is put back, with a warning); anything else keeps the
branch with D3's reason. The composition root installs :func:`resolver_for_session` as the
runtime's ``ResolverFactory`` (``orchestrator.runtime.plugins``), and merge-back receives what it
builds as a plain callable, so the core never imports this module (D9); :func:`make_resolver` is
the same subagent for a caller without a session (the stress harness, ``reverie reflections merge``).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import partial

import anyio
from anyio import CancelScope
from anyio import Path as AsyncPath

from orchestrator.agent.budget import BudgetedModel, Meter
from orchestrator.agent.context import SessionContext
from orchestrator.base import blocking
from orchestrator.base.config import Settings
from orchestrator.base.limits import LimitReached, Prices, limits_for
from orchestrator.memfs.conflicts import mark_resolved, side_of, unmerged_paths
from orchestrator.memfs.gitwrap import LOCK_HELD_ENV, lock_held_value
from orchestrator.memfs.guard import report
from orchestrator.memfs.parent import settle as settle_parent
from orchestrator.memfs.parent import watch
from orchestrator.memfs.resolution import Conflict, Resolver, ResolverFailed
from orchestrator.models.types import Message, ModelClient, ModelRequest
from orchestrator.tools import ToolContext, run_tool, tool_specs
from prompts import load_prompt

__all__ = ["RESOLVER_MAX_STEPS", "ResolverSubagent", "conflict_request_text", "make_resolver", "resolver_for_session"]

RESOLVER_MAX_STEPS = 8
_TOOLS = ("bash", "read_file", "write_file", "edit_file")
_MARKERS = ("<<<<<<< ", ">>>>>>> ")
_STANDALONE = Settings(model="", bash_timeout=60.0)
"""A resolver without a session's settings: the client's own model, a 60 s command limit."""


def _block(tag: str, text: str | None) -> str:
    if text is None:
        return f'<{tag} deleted="true"/>'
    return f"<{tag}>\n{text if text.endswith(chr(10)) or not text else text + chr(10)}</{tag}>"


async def conflict_request_text(conflict: Conflict) -> str:
    """The user message: what conflicts, and both sides of every file."""
    parts = [
        f"Rebasing {conflict.branch} onto {conflict.onto[:12]}: commit {conflict.commit[:12]} "
        f"({conflict.subject!r}) conflicts in {len(conflict.files)} file(s)."
    ]
    for rel in conflict.files:
        head = await side_of(conflict.worktree, 2, rel)
        branch = await side_of(conflict.worktree, 3, rel)
        parts.append(f'<conflict path="{rel}">\n{_block("head", head)}\n{_block("branch", branch)}\n</conflict>')
    return "\n\n".join(parts) + "\n"


@dataclass(frozen=True)
class ResolverSubagent:
    """Callable as a :data:`~orchestrator.memfs.resolution.Resolver`."""

    model: ModelClient
    agent_id: str
    agent_name: str = "reverie"
    settings: Settings = _STANDALONE
    """The model's name, the user's ``[reflection] merge_instructions`` and the tools' settings."""

    def system_prompt(self) -> str:
        extra = ""
        instructions = self.settings.reflection_merge_instructions
        if instructions and instructions.strip():
            extra = "# Instructions from the user\n" + instructions.strip() + "\n"
        return load_prompt("resolver").replace("{MERGE_INSTRUCTIONS}", extra).rstrip() + "\n"

    async def __call__(self, conflict: Conflict) -> None:
        ctx = ToolContext.from_settings(
            self.settings,
            workspace=conflict.worktree,
            agent_id=self.agent_id,
            conversation_id=f"resolve-{conflict.commit[:12]}",
            agent_name=f"{self.agent_name} (merge resolver)",
            memory_dir=conflict.worktree,
            extra_env={} if conflict.lock_held is None else {LOCK_HELD_ENV: lock_held_value(conflict.lock_held)},
        )
        messages: list[Message] = [Message(role="user", content=await conflict_request_text(conflict))]
        # a caller holding the repository's lock cannot have the parent settled under it
        watched = await watch(conflict.worktree, f"resolver-{conflict.commit[:12]}") if conflict.lock_held is None else None
        try:
            await self._loop(ctx, messages)
        finally:
            with CancelScope(shield=True):
                displaced = await settle_parent(watched, own_branch=conflict.branch)
        if displaced is not None:
            await blocking.run_sync("files", partial(report, conflict.worktree, displaced.message, restored=True))
            raise ResolverFailed(displaced.message)
        await self._stage_clean_edits(conflict)
        said = " ".join(messages[-1].content.split())[:200] if messages[-1].role == "assistant" else ""
        if await unmerged_paths(conflict.worktree):
            raise ResolverFailed(said or "the resolver left the files conflicted")

    async def _loop(self, ctx: ToolContext, messages: list[Message]) -> None:
        specs = tool_specs(list(_TOOLS))
        system = self.system_prompt()
        for _ in range(RESOLVER_MAX_STEPS):
            response = await self.model.complete(
                ModelRequest(system=system, messages=tuple(messages), tools=specs, model=self.settings.model, purpose="resolve")
            )
            messages.append(response.message)
            if not response.message.tool_calls:
                break
            for call in response.message.tool_calls:
                result = await run_tool(call.name, call.arguments, ctx)
                messages.append(Message(role="tool", content=result.output, tool_call_id=call.id, name=call.name))
        else:
            raise ResolverFailed(f"the resolver did not finish within {RESOLVER_MAX_STEPS} steps")

    async def _stage_clean_edits(self, conflict: Conflict) -> None:
        """A file the model rewrote without markers but forgot to stage is staged for it."""
        for rel in await unmerged_paths(conflict.worktree):
            try:
                text = await AsyncPath(conflict.worktree / rel).read_text(encoding="utf-8")
            except (OSError, UnicodeDecodeError):
                continue
            if not any(line.startswith(_MARKERS) for line in text.splitlines()) and "=======" not in text.splitlines():
                await mark_resolved(conflict.worktree, rel)


def make_resolver(
    model: ModelClient, *, agent_id: str, agent_name: str = "reverie", settings: Settings | None = None
) -> Resolver:
    """A resolver for merge-back's ``resolver`` parameter (the ``resolve`` policy of D3), outside a
    session: ``settings`` (default: the client's own model, the default tools, a 60 s limit)."""
    return ResolverSubagent(model, agent_id, agent_name, settings or _STANDALONE)


def resolver_for_session(*, context: SessionContext, model: ModelClient) -> Resolver:
    """The session's resolver (a ``ResolverFactory``): each conflict is resolved with the agent's
    name and the settings as they are when it arrives (a ``/model`` switch applies to the next), as
    a launch of its own under ``[limits] resolver_*`` counted in the session's meter (B1). A resolver
    out of budget publishes ``limit.reached`` and fails like any other, so the branch is kept (D3)."""

    async def resolve(conflict: Conflict) -> None:
        settings, agent = context.settings, context.agent
        limits = limits_for(settings, "resolver")
        meter = Meter(limits, Prices.of(settings), parent=context.meter)
        budgeted = BudgetedModel(model, meter, window=settings.context_window)
        try:
            with anyio.fail_after(limits.seconds if limits.seconds is not None else math.inf):
                await ResolverSubagent(budgeted, agent.agent_id, agent.name, settings)(conflict)
        except (LimitReached, TimeoutError) as exc:
            seconds = limits.seconds or 0.0
            stop = exc if isinstance(exc, LimitReached) else LimitReached("resolver.seconds", seconds, seconds)
            await context.publish(stop.event(conflict.branch), None)
            raise ResolverFailed(str(stop)) from None

    return resolve

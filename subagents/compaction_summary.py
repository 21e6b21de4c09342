"""What one compaction asks of the model and of memory: the summary and the prompt it commits.

The summary is the compaction ladder (``orchestrator.compaction.summarize_with_fallback``) run
under the compaction's own meter (B2, ``[limits] compaction_*``), every request it makes published
as the session's ``model.called``, on the core memory compiled in a worktree of its own at the
current revision (C9: removed with its branch whatever happens; a repository it cannot branch
means no core memory, not a failure). The prompt is recompiled from the parent checkout for the
commit point. Both live apart from :mod:`subagents.compaction`, which decides when to compact and
commits the result, because neither needs the subagent's per-conversation state.
"""

from __future__ import annotations

import sys
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping, Sequence
from contextlib import asynccontextmanager
from dataclasses import replace
from functools import partial

import anyio

from orchestrator.agent.audit import compile_audited
from orchestrator.agent.budget import BudgetedModel, Meter
from orchestrator.agent.context import SessionContext
from orchestrator.agent.prompt_cache import record_from
from orchestrator.base import blocking
from orchestrator.base.events import Event, ModelCalled
from orchestrator.base.limits import Prices, limits_for
from orchestrator.compaction import CompactionOutcome, CompactionPlan, CompactionSettings
from orchestrator.compaction.ladder import summarize_with_fallback
from orchestrator.compaction.packaging import summary_message, summary_message_text
from orchestrator.memfs.worktrees import create_worktree, remove_worktree
from orchestrator.models.metered import MeteredModel
from orchestrator.models.types import Message, ModelClient
from orchestrator.store import PromptRecord, StoredMessage

__all__ = ["WORKTREE_KIND", "recompile", "summarize", "summary_message_for"]

WORKTREE_KIND = "compaction"
_CORE_MEMORY_TEMPLATE = "{CORE_MEMORY}"


def _retries_itself(model: ModelClient) -> bool:
    """``OpenAIModel`` retries transient errors itself; checked without importing the SDK."""
    module = sys.modules.get("orchestrator.models.openai_client")
    return module is not None and isinstance(model, module.OpenAIModel)


def _previous_summary(history: Sequence[StoredMessage]) -> str | None:
    for stored in history:
        if stored.message.kind == "summary":
            block = stored.metadata.get("compaction")
            raw = block.get("summary") if isinstance(block, Mapping) else None
            if isinstance(raw, str) and raw:
                return raw
    return None


@asynccontextmanager
async def _core_memory(context: SessionContext) -> AsyncIterator[str | None]:
    """C9: a worktree at the current revision, removed (with its branch) whatever happens."""
    agent = context.agent
    try:
        worktree = await create_worktree(agent.memory_dir, agent_id=agent.agent_id, kind=WORKTREE_KIND)
    except Exception:
        yield None
        return
    try:
        audited = await blocking.run_sync(
            "git", partial(compile_audited, worktree.path, _CORE_MEMORY_TEMPLATE, agent_id=agent.agent_id)
        )
        yield audited.compiled.core_memory or None
    finally:
        with anyio.CancelScope(shield=True):
            await remove_worktree(agent.memory_dir, worktree, drop_branch=True)


async def summarize(
    context: SessionContext,
    compaction: CompactionSettings,
    history: Sequence[StoredMessage],
    plan: CompactionPlan,
    *,
    fixed: int,
    tool_tokens: int,
    trigger: str,
    sleep: Callable[[float], Awaitable[None]],
    emit: Callable[[Event], Awaitable[None]],
) -> CompactionOutcome:
    """The ladder's outcome for ``plan`` over ``history`` (``fixed``: the system prompt's and tools'
    tokens). ``emit`` publishes each request's ``model.called`` and a limit's ``limit.reached``:
    a compaction out of budget falls back down the ladder (to eviction at worst, C3), and the stop
    is still reported (B1)."""

    async def counted(event: ModelCalled) -> None:
        await emit(event)

    settings = context.settings
    meter = Meter(limits_for(settings, "compaction"), Prices.of(settings), parent=context.meter)
    model = BudgetedModel(MeteredModel(context.model, counted), meter, window=settings.context_window)
    try:
        async with _core_memory(context) as core_memory:
            return await summarize_with_fallback(
                [m.message for m in history],
                plan,
                compaction,
                model,
                model=settings.model,
                trigger=trigger,
                core_memory=core_memory,
                previous_summary=_previous_summary(history),
                system_prompt_tokens=fixed - tool_tokens,
                tool_tokens=tool_tokens,
                sleep=sleep,
                max_attempts=1 if _retries_itself(context.model) else 3,
            )
    finally:
        if model.refused is not None:
            await emit(model.refused.event("compaction"))


async def recompile(context: SessionContext, conversation_id: str, message_count: int) -> PromptRecord:
    """The conversation's prompt compiled afresh from the parent checkout at ``HEAD`` (audited: an
    invalid revision is recorded as the one it fell back from)."""
    agent = context.agent
    audited = await blocking.run_sync(
        "git",
        partial(
            compile_audited,
            agent.memory_dir,
            agent.raw_system,
            agent_id=agent.agent_id,
            conversation_id=conversation_id,
            previous_message_count=message_count,
        ),
    )
    record = record_from(audited.compiled, conversation_id=conversation_id, agent_id=agent.agent_id)
    return record if audited.invalid_revision is None else replace(record, memfs_revision=audited.invalid_revision)


def summary_message_for(summary: str, mode: str, evicted: int) -> Message:
    """The message a compaction commits: ``summary`` in its wrapper text (COMPACTION-4.1)."""
    return summary_message(summary_message_text(summary, mode=mode, evicted_count=evicted))

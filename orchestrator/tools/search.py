"""``conversation_search``: the store's transcript search (COMPACTION-8.6 [REVERIE]) scoped to the
calling agent, returning the 8.5 result objects as a JSON array."""

from __future__ import annotations

import json

from orchestrator.store import StoreError
from orchestrator.tools.context import ToolContext, ToolResult

__all__ = ["DEFAULT_SEARCH_LIMIT", "conversation_search"]

DEFAULT_SEARCH_LIMIT = 10


async def conversation_search(
    ctx: ToolContext,
    query: str,
    limit: int = DEFAULT_SEARCH_LIMIT,
    start_date: str | None = None,
    end_date: str | None = None,
    conversation_id: str | None = None,
) -> ToolResult:
    """Search every message this agent ever exchanged (evicted ones included); ``[]`` when none match."""
    if ctx.store is None:
        return ToolResult(False, "conversation_search is unavailable: no conversation store in this context")
    try:
        hits = await ctx.store.search(
            query,
            agent_id=ctx.agent_id,
            conversation_id=conversation_id,
            limit=limit,
            start_date=start_date,
            end_date=end_date,
        )
    except StoreError as exc:
        return ToolResult(False, str(exc))
    return ToolResult(True, json.dumps([h.as_dict() for h in hits], ensure_ascii=False, indent=2))

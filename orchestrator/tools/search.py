"""``conversation_search``: the store's transcript search (COMPACTION-8.6 [REVERIE]) scoped to the
calling agent, returning the 8.5 result objects as a JSON array.

Every argument is checked before the store is asked, and a bad one is one error naming it: the
store's own rules (COMPACTION-8: a limit of 0 returns nothing, an unparseable date disables its
filter) suit a command line, but a model that wrote ``2026-02-30`` or ``limit: 1e20`` should hear
so rather than get every message or an ``OverflowError``. The ranges are here, and in the schema.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta

from orchestrator.store import StoreError
from orchestrator.tools.context import ToolContext, ToolResult

__all__ = ["DEFAULT_SEARCH_LIMIT", "MAX_QUERY_CHARS", "MAX_SEARCH_LIMIT", "conversation_search"]

DEFAULT_SEARCH_LIMIT = 10
MAX_SEARCH_LIMIT = 1_000
"""``limit`` runs from 1 to this; more results than this would not fit a context anyway."""
MAX_QUERY_CHARS = 2_000
"""Keywords and quoted phrases, not a pasted document."""


class _BadArgument(Exception):
    """One argument refused; the message names it."""


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
        _check(query, limit, start_date, end_date)
        conversation_id = (conversation_id or "").strip() or None
        if conversation_id is not None:
            found = await ctx.store.get_conversation(conversation_id)
            if found is None or found.agent_id != ctx.agent_id:
                raise _BadArgument(f'argument "conversation_id": none of your conversations has the id {conversation_id!r}')
        hits = await ctx.store.search(
            query,
            agent_id=ctx.agent_id,
            conversation_id=conversation_id,
            limit=limit,
            start_date=start_date,
            end_date=end_date,
        )
    except _BadArgument as exc:
        return ToolResult(False, f"conversation_search: {exc}")
    except StoreError as exc:
        return ToolResult(False, str(exc))
    return ToolResult(True, json.dumps([h.as_dict() for h in hits], ensure_ascii=False, indent=2))


def _check(query: str, limit: int, start_date: str | None, end_date: str | None) -> None:
    if len(query) > MAX_QUERY_CHARS:
        raise _BadArgument(f'argument "query" has {len(query):,} characters; at most {MAX_QUERY_CHARS:,}')
    if isinstance(limit, bool) or not isinstance(limit, int) or not 1 <= limit <= MAX_SEARCH_LIMIT:
        raise _BadArgument(f'argument "limit" must be a whole number from 1 to {MAX_SEARCH_LIMIT:,}, not {limit!r}')
    start = _moment("start_date", start_date)
    end = _moment("end_date", end_date)
    if start is not None and end is not None and start > end:
        raise _BadArgument(f'argument "start_date" ({start_date}) is after "end_date" ({end_date})')


def _moment(name: str, raw: str | None) -> datetime | None:
    """``raw`` as an aware moment (no zone: UTC, as the store reads it; an end that is a date alone
    covers that whole day, as in ``store.projection.parse_bound``), None when blank, or
    ``_BadArgument``."""
    if raw is None or not raw.strip():
        return None
    text = raw.strip()
    try:
        moment = datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError as exc:
        reason = str(exc)
        if reason.startswith("Invalid isoformat"):
            reason = "expected YYYY-MM-DD or YYYY-MM-DDTHH:MM[:SS][Z|+HH:MM]"
        raise _BadArgument(f'argument "{name}" is not a real date: {raw!r} ({reason})') from None
    moment = moment if moment.tzinfo is not None else moment.replace(tzinfo=UTC)
    if name == "end_date" and len(text) == 10:
        moment += timedelta(days=1) - timedelta(milliseconds=1)
    return moment

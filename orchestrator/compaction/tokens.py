"""Token estimation, context size and the compaction thresholds (COMPACTION-1.1, COMPACTION-1.2; C4, C8).

The estimate is letta-code's chars/4 heuristic, kept on purpose: conformance cases encode cutoffs that
depend on it, and the planner only needs a monotone, cheap measure. Provider usage, when a provider
reports it, is the better number and wins (C8).
"""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from dataclasses import dataclass
from fractions import Fraction
from typing import Literal

from orchestrator.models.types import Message, ToolSpec, Usage

__all__ = [
    "DEFAULT_SOFT_FRACTION",
    "ContextSize",
    "context_size",
    "estimate_message",
    "estimate_messages",
    "estimate_text",
    "reserve",
    "should_compact",
    "should_prepare",
    "soft_threshold",
    "system_prompt_tokens",
    "threshold",
    "tool_schema_tokens",
    "usage_tokens",
]

DEFAULT_SOFT_FRACTION = Fraction(4, 5)
_RESERVE_CAP = 16384


def estimate_text(text: str) -> int:
    """``ceil(len(text) / 4)``: the unit every estimate in compaction is built from."""
    return -(-len(text) // 4)


def estimate_message(message: Message) -> int:
    """``est(m)`` of COMPACTION-1.1 for reverie's message shape.

    A tool call costs its name plus its JSON arguments as sent (reverie keeps arguments as the raw JSON
    text, which is what letta-code serialises); tool name and call id of a tool result cost nothing.
    """
    chars = len(message.content)
    if message.role == "assistant":
        for call in message.tool_calls:
            chars += len(call.name) + len(call.arguments)
    return -(-chars // 4)


def estimate_messages(messages: Sequence[Message]) -> int:
    """``est_list``: each message is rounded up on its own before summing."""
    return sum(estimate_message(m) for m in messages)


def usage_tokens(usage: Usage | None) -> int:
    """Tokens a provider reported for one call; 0 means "no usage" (C8: fall back to the estimate)."""
    if usage is None:
        return 0
    total = usage.prompt_tokens + usage.completion_tokens
    return total if total > 0 else 0


def system_prompt_tokens(system_prompt: str) -> int:
    """``S`` of COMPACTION-1.1."""
    return estimate_text(system_prompt)


def tool_schema_tokens(tools: Sequence[ToolSpec]) -> int:
    """``T`` of COMPACTION-1.1: compact JSON of the tool list; an empty list (``[]``) costs 1."""
    payload = [
        {"name": t.name, "description": t.description, "parameters": dict(t.parameters)} for t in tools
    ]
    return estimate_text(json.dumps(payload, separators=(",", ":"), ensure_ascii=False))


@dataclass(frozen=True)
class ContextSize:
    """How full the context is, and where the number came from (``source`` feeds the pressure event)."""

    tokens: int
    usage_tokens: int
    trailing_tokens: int
    source: Literal["usage", "estimate"]


def context_size(
    messages: Sequence[Message],
    *,
    system_prompt_tokens: int,
    tool_tokens: int,
    usage: Usage | None = None,
    usage_index: int | None = None,
) -> ContextSize:
    """Context size per C8.

    ``usage`` is the usage of the newest provider response made after the last compaction, and
    ``usage_index`` the index of the assistant message that response produced. Kept messages sit after
    the summary but are older, so only the caller (which knows when each response arrived) can tell a
    fresh usage from a stale one; pass ``usage=None`` right after a compaction. The provider's usage
    already includes the system prompt and tools, so nothing is added to it.
    """
    used = usage_tokens(usage)
    if used > 0 and usage_index is not None and 0 <= usage_index < len(messages):
        trailing = estimate_messages(messages[usage_index + 1 :])
        return ContextSize(used + trailing, used, trailing, "usage")
    estimate = estimate_messages(messages)
    return ContextSize(system_prompt_tokens + estimate + tool_tokens, 0, estimate, "estimate")


def _valid_window(window: float | None) -> bool:
    return window is not None and isinstance(window, int | float) and math.isfinite(window) and window > 0


def reserve(window: int) -> int:
    """Room kept for the answer: 16,384 tokens, capped at 20 % of small windows (COMPACTION-1.2)."""
    return min(_RESERVE_CAP, max(1, math.floor(window * 0.2)))


def threshold(window: float | None) -> int | None:
    """Trigger threshold; ``None`` (never compact) for a missing, zero, negative or infinite window."""
    if not _valid_window(window):
        return None
    assert window is not None
    w = math.floor(window)
    return max(0, w - reserve(w))


def should_compact(tokens: int | None, window: float | None) -> bool:
    """Strict comparison: a context exactly at the threshold does not compact."""
    limit = threshold(window)
    return tokens is not None and limit is not None and tokens > limit


def soft_threshold(window: float | None, fraction: Fraction | float = DEFAULT_SOFT_FRACTION) -> int | None:
    """Where background preparation may start (C4): ``floor(fraction * threshold)``, exact arithmetic."""
    limit = threshold(window)
    if limit is None:
        return None
    exact = Fraction(str(fraction)) if isinstance(fraction, float) else fraction
    return math.floor(exact * limit)


def should_prepare(
    tokens: int | None, window: float | None, fraction: Fraction | float = DEFAULT_SOFT_FRACTION
) -> bool:
    """True once usage passes the soft threshold (strictly, like the trigger)."""
    limit = soft_threshold(window, fraction)
    return tokens is not None and limit is not None and tokens > limit

"""The summary as the model and the store see it (COMPACTION-3.6, COMPACTION-4.1 to COMPACTION-4.3, COMPACTION-5.7; C1, C3).

The model sees plain text only: letta-code's wrapper sentence and the summary, with ``k`` the number of
messages that really left the context (C1 fixes two weak spots of COMPACTION-10: an off-by-one count and JSON noise). Token stats are
for people and the store, so they live in the message's metadata.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any

from orchestrator.models.types import Message

__all__ = [
    "EMERGENCY_SUMMARY",
    "EMPTY_SUMMARY",
    "SUMMARY_CLIP_SUFFIX",
    "CompactionStats",
    "clip_summary",
    "raw_summary_from_text",
    "summary_message",
    "summary_message_text",
]

EMERGENCY_SUMMARY = (
    "Summary unavailable: the summarizer failed. Earlier messages were removed from context and remain "
    "searchable with conversation_search."
)
EMPTY_SUMMARY = "No prior conversation messages."
SUMMARY_CLIP_SUFFIX = "... [summary truncated to fit]"
_PREFIX_SLIDING_COUNT = (
    "Note: {k} messages from the beginning of the conversation have been hidden from view due to memory "
    "constraints.\nThe following is a summary of the previous messages:\n "
)
_PREFIX_SLIDING = (
    "Note: prior messages from the beginning of the conversation have been hidden from view due to "
    "conversation memory constraints.\nThe following is a summary of the previous messages:\n "
)
_PREFIX_ALL = (
    "Note: prior messages have been hidden from view due to conversation memory constraints.\n"
    "The following is a summary of the previous messages:\n "
)
_HEADER = re.compile(
    r"The following is (?:a summary|an in-context recursive summary)(?: of the previous messages| of the prior messages)?:\s*"
)


def summary_message_text(summary: str, *, mode: str | None, evicted_count: int | None) -> str:
    """The model-visible text of COMPACTION-4.1 (``message``), byte for byte.

    ``mode`` is the mode actually used (``all`` after escalation); ``evicted_count`` is ``k`` of C1/S4.
    """
    if mode == "sliding_window":
        if evicted_count is None:
            return _PREFIX_SLIDING + summary
        return _PREFIX_SLIDING_COUNT.format(k=evicted_count) + summary
    return _PREFIX_ALL + summary


def raw_summary_from_text(text: str) -> str | None:
    """The raw summary inside a summary message's text (COMPACTION-4.5 header rule), else ``None``.

    Used when the store lost a summary's raw text: the pinned block (C5) can still be recovered.
    """
    match = _HEADER.search(text)
    if match is None:
        return None
    return text[match.end() :].strip()


def summary_message(text: str) -> Message:
    """A summary is a user-role message (mid-conversation inserts can only be user-role, 4.2)."""
    return Message(role="user", content=text, kind="summary")


def clip_summary(summary: str, clip_chars: int | None) -> str:
    """COMPACTION-3.6 step 2; ``None`` disables clipping."""
    if clip_chars is not None and len(summary) > clip_chars:
        return summary[:clip_chars] + SUMMARY_CLIP_SUFFIX
    return summary


@dataclass(frozen=True)
class CompactionStats:
    """COMPACTION-4.3 plus reverie's ``identifier_retention`` (C6), stored in metadata only."""

    trigger: str
    context_tokens_before: int
    context_tokens_after: int
    context_window: int | None
    messages_count_before: int
    messages_count_after: int
    identifier_retention: float = 1.0

    def as_dict(self) -> dict[str, Any]:
        """Key order of 4.3; ``context_window`` left out when unknown."""
        data: dict[str, Any] = {
            "trigger": self.trigger,
            "context_tokens_before": self.context_tokens_before,
            "context_tokens_after": self.context_tokens_after,
            "context_window": self.context_window,
            "messages_count_before": self.messages_count_before,
            "messages_count_after": self.messages_count_after,
            "identifier_retention": self.identifier_retention,
        }
        if self.context_window is None:
            del data["context_window"]
        return data

    def to_json(self) -> str:
        return json.dumps(self.as_dict(), separators=(",", ":"), ensure_ascii=False)

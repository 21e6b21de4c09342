"""Conversation compaction: when the context fills up, summarise the oldest messages and keep the rest.

Pure pieces (tokens, settings, planner, transcript, packaging, identifiers) have no I/O; ``ladder``
talks to the model through the ``ModelClient`` seam. The caller (turn loop or compaction subagent)
applies an outcome to the store.

The planner, settings and token estimates load with the package: a turn consults them before
every request. What only a compaction run uses (the ladder, packaging, identifiers, transcripts)
loads on first use (PEP 562), so a chat's first request does not wait for it (P1).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from orchestrator.base.lazy import lazy_attributes
from orchestrator.compaction.planner import (
    MIN_KEPT_CHARS,
    CompactionPlan,
    ContextWindowTooSmall,
    PlanningError,
    find_sliding_cutoff,
    hard_limit,
    plan_all,
    plan_compaction,
    plan_emergency,
    summary_allowance,
)
from orchestrator.compaction.settings import CompactionMode, CompactionSettings, CompactionSettingsError
from orchestrator.compaction.tokens import (
    ContextSize,
    context_size,
    estimate_message,
    estimate_messages,
    estimate_text,
    should_compact,
    should_prepare,
    soft_threshold,
    system_prompt_tokens,
    threshold,
    tool_schema_tokens,
)

if TYPE_CHECKING:
    from orchestrator.compaction.identifiers import (
        Retention,
        extract_identifiers,
        missing_identifiers,
        retention,
    )
    from orchestrator.compaction.ladder import (
        CompactionOutcome,
        SummaryAttempt,
        compact,
        summarize_with_fallback,
        summarizer_system_prompt,
    )
    from orchestrator.compaction.packaging import (
        EMERGENCY_SUMMARY,
        EMPTY_SUMMARY,
        CompactionStats,
        clip_summary,
        raw_summary_from_text,
        summary_message,
        summary_message_text,
    )
    from orchestrator.compaction.transcript import (
        clip_tool_result_on_load,
        render_transcript,
        shrink_transcript,
        summarizer_input,
    )

__all__ = [
    "MIN_KEPT_CHARS",
    "EMERGENCY_SUMMARY",
    "EMPTY_SUMMARY",
    "CompactionMode",
    "CompactionOutcome",
    "CompactionPlan",
    "CompactionSettings",
    "CompactionSettingsError",
    "CompactionStats",
    "ContextWindowTooSmall",
    "ContextSize",
    "PlanningError",
    "Retention",
    "SummaryAttempt",
    "clip_summary",
    "clip_tool_result_on_load",
    "compact",
    "context_size",
    "estimate_message",
    "estimate_messages",
    "estimate_text",
    "extract_identifiers",
    "find_sliding_cutoff",
    "hard_limit",
    "missing_identifiers",
    "plan_all",
    "plan_compaction",
    "plan_emergency",
    "raw_summary_from_text",
    "render_transcript",
    "retention",
    "should_compact",
    "should_prepare",
    "shrink_transcript",
    "soft_threshold",
    "summarize_with_fallback",
    "summarizer_input",
    "summarizer_system_prompt",
    "summary_allowance",
    "summary_message",
    "summary_message_text",
    "system_prompt_tokens",
    "threshold",
    "tool_schema_tokens",
]

_HOME = {
    "Retention": "identifiers",
    "extract_identifiers": "identifiers",
    "missing_identifiers": "identifiers",
    "retention": "identifiers",
    "CompactionOutcome": "ladder",
    "SummaryAttempt": "ladder",
    "compact": "ladder",
    "summarize_with_fallback": "ladder",
    "summarizer_system_prompt": "ladder",
    "CompactionStats": "packaging",
    "EMERGENCY_SUMMARY": "packaging",
    "EMPTY_SUMMARY": "packaging",
    "clip_summary": "packaging",
    "raw_summary_from_text": "packaging",
    "summary_message": "packaging",
    "summary_message_text": "packaging",
    "clip_tool_result_on_load": "transcript",
    "render_transcript": "transcript",
    "shrink_transcript": "transcript",
    "summarizer_input": "transcript",
}

__getattr__ = lazy_attributes(__name__, globals(), _HOME)

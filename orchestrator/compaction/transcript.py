"""What the summarizer reads: messages rendered to lines, the transcript envelope, and the cuts that
keep it inside a budget (COMPACTION-3.1, COMPACTION-3.2, COMPACTION-7.6; C5, S6).

The line format and the envelope are letta-code's, byte for byte, because summaries written against
that format are what users already know. Two reverie changes: a previous summary is not a line (it is
handed over as a pinned block to update, C5), and ``memory_update`` reminders are not rendered at all
(TURN-3.4: the recompiled system prompt already holds that memory).
"""

from __future__ import annotations

from collections.abc import Sequence

from orchestrator.compaction.tokens import estimate_text
from orchestrator.models.types import Message
from orchestrator.tools.truncation import clip_middle, clip_tool_result

__all__ = [
    "EMPTY_TRANSCRIPT",
    "LOAD_CLIP_CHARS",
    "TOOL_RETURN_CHARS",
    "clip_middle",
    "clip_tool_result_on_load",
    "render_line",
    "render_transcript",
    "shrink_transcript",
    "summarizer_input",
]

TOOL_RETURN_CHARS = 2000
LOAD_CLIP_CHARS = 40_000
_HEAD = " \n"
_TAIL = "\n \n. Generate the summary."
EMPTY_TRANSCRIPT = _HEAD + _TAIL


def render_line(message: Message, *, tool_limit: int = TOOL_RETURN_CHARS) -> str | None:
    """One transcript line, or ``None`` when the message contributes nothing.

    Tool-call arguments are rendered in full (they are the raw JSON the model sent; an empty argument
    string renders as ``{}``); only tool returns are cut. A ``system`` role message, which the
    in-context list should not hold, is labelled ``system`` rather than silently dropped.
    """
    if message.kind in ("summary", "memory_update"):
        return None
    text = message.content
    if message.role == "tool":
        if len(text) > tool_limit:
            text = f"{text[:tool_limit]}... [truncated {len(text) - tool_limit} chars]"
    calls = message.tool_calls if message.role == "assistant" else ()
    if calls:
        rendered = ", ".join(f"{call.name}({call.arguments or '{}'})" for call in calls)
        text = text + (" " if text else "") + "-> " + rendered
    if not text:
        return None
    return f"[{message.role}] {text}"


def render_transcript(messages: Sequence[Message], *, tool_limit: int = TOOL_RETURN_CHARS) -> str:
    """The envelope of COMPACTION-3.2: ``" \\n" + lines + "\\n \\n. Generate the summary."``."""
    lines = [line for m in messages if (line := render_line(m, tool_limit=tool_limit)) is not None]
    return _HEAD + "\n".join(lines) + _TAIL


def clip_tool_result_on_load(text: str, max_chars: int = LOAD_CLIP_CHARS) -> str:
    """COMPACTION-7.6: applied to tool results when a conversation is loaded; storage keeps the whole text."""
    return clip_tool_result(text, max_chars)


def _budget_marker(dropped: int) -> str:
    return f"\n[TRUNCATED: dropped {dropped} middle chars due to context budget]\n"


def shrink_transcript(transcript: str, budget_tokens: int) -> str:
    """Fit a transcript into ``budget_tokens`` (chars/4) by cutting its middle (S6).

    Unlike letta-code's fixed character ladder (which keeps 30 % head + 30 % tail of each budget and
    wastes the rest, W10), the whole budget is used: head and tail split it evenly, so the oldest
    context and the newest messages, plus the closing instruction, survive.
    """
    budget_chars = max(0, budget_tokens) * 4
    if estimate_text(transcript) <= budget_tokens:
        return transcript
    return clip_middle(transcript, budget_chars, _budget_marker)


def summarizer_input(
    transcript: str, *, previous_summary: str | None = None, core_memory: str | None = None
) -> str:
    """The summarizer's single user message.

    Without a previous summary or core memory it is exactly the transcript (letta-code's request). The
    pinned blocks come first so the model reads what it must update, and what memory already holds
    (C9: the summary need not repeat it), before the messages being evicted.
    """
    parts: list[str] = []
    if previous_summary:
        parts.append(f"<previous_summary>\n{previous_summary}\n</previous_summary>")
    if core_memory:
        parts.append(f"<core_memory>\n{core_memory}\n</core_memory>")
    if not parts:
        return transcript
    parts.append(f"<evicted_messages>{transcript}\n</evicted_messages>")
    return "\n\n".join(parts)

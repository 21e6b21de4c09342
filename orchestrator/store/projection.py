"""Pure logic of transcript search (COMPACTION-8): projecting a stored message into search
candidates, their searchable text, query parsing, and turning a parsed query into an FTS5 expression.

Message types. A stored message projects to one or more parts, each a search candidate:
``user_message``, ``assistant_message`` (text), ``tool_call_message`` (one per tool call; letta-code's
local mode calls these ``approval_request_message`` because its client runs the tools, reverie runs
them itself, so it uses the Letta API name of an executed call), ``tool_return_message``,
``summary_message`` (searchable through its raw summary, 4.4), ``system_message``, and reverie's own
kinds ``reminder_message``, ``memory_update_message`` and ``error_message``.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

from orchestrator.models.types import Message
from orchestrator.store.records import format_time

__all__ = [
    "EPOCH",
    "FTS_MIN_CHARS",
    "ParsedQuery",
    "Projected",
    "fts_expression",
    "like_pattern",
    "normalize",
    "parse_bound",
    "parse_query",
    "project",
]

EPOCH = "1970-01-01T00:00:00.000Z"
FTS_MIN_CHARS = 3
_WS = re.compile(r"\s+")


@dataclass(frozen=True)
class ParsedQuery:
    """A search query split into bare terms and quoted phrases."""

    terms: tuple[str, ...]
    phrases: tuple[str, ...]

    @property
    def needles(self) -> tuple[str, ...]:
        """Every phrase and term, normalised as the searchable text is; all must occur (AND)."""
        return tuple(n for n in (normalize(x) for x in (*self.phrases, *self.terms)) if n)

    @property
    def empty(self) -> bool:
        return not self.terms and not self.phrases


@dataclass(frozen=True)
class Projected:
    """One search candidate: its type, projected id, date, result fields and normalised text."""

    part: int
    message_type: str
    id: str
    date: str
    fields: Mapping[str, Any]
    text: str


def normalize(text: str) -> str:
    """Lower-case, collapse whitespace runs to one space, trim (8.3). NUL counts as whitespace: FTS5
    query strings cannot hold it."""
    return _WS.sub(" ", text.replace("\x00", " ").lower()).strip()


def parse_query(query: str) -> ParsedQuery:
    """Split a query into terms and quoted phrases exactly as 8.2 says, unclosed-quote rule included."""
    query = query.strip()
    if not query:
        return ParsedQuery((), ())
    terms: list[str] = []
    phrases: list[str] = []
    buffer: list[str] = []
    quoted = False

    def flush() -> None:
        piece = "".join(buffer).strip()
        buffer.clear()
        if piece:
            (phrases if quoted else terms).append(piece)

    for char in query:
        if char == '"':
            flush()
            quoted = not quoted
        elif char.isspace() and not quoted:
            flush()
        else:
            buffer.append(char)
    if quoted:
        return ParsedQuery(tuple(query.split()), ())
    flush()
    return ParsedQuery(tuple(terms), tuple(phrases))


def fts_expression(needles: tuple[str, ...]) -> str | None:
    """An FTS5 MATCH expression requiring every needle of at least 3 characters as a substring of the
    ``text`` column, or None when there is none. Each needle is a quoted string with ``"`` doubled,
    so no query can reach FTS5 operators or column filters."""
    parts = [f'{{text}} : "{n.replace(chr(34), chr(34) * 2)}"' for n in needles if len(n) >= FTS_MIN_CHARS]
    return " AND ".join(parts) if parts else None


def like_pattern(needle: str) -> str:
    """A LIKE pattern (escape character ``\\``) matching ``needle`` anywhere."""
    escaped = needle.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_")
    return f"%{escaped}%"


def parse_bound(raw: str | None, *, end: bool) -> str | None:
    """A date filter bound as a stored-time string, or None when absent or unparseable (8.4: an
    unparseable bound disables that filter). A date without a time covers the whole day as an end
    bound (what a user asking "until 2026-01-02" means)."""
    if raw is None or not raw.strip():
        return None
    text = raw.strip()
    try:
        moment = datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        return None
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=UTC)
    if end and len(text) == 10:
        moment = moment + timedelta(days=1) - timedelta(milliseconds=1)
    return format_time(moment)


def _base_date(metadata: Mapping[str, Any], created_at: str) -> datetime | None:
    for raw in (metadata.get("created_at"), created_at):
        if isinstance(raw, str):
            try:
                moment = datetime.fromisoformat(raw.replace("Z", "+00:00"))
            except ValueError:
                continue
            return moment if moment.tzinfo else moment.replace(tzinfo=UTC)
    return None


def _type_of(message: Message) -> str:
    by_kind = {
        "summary": "summary_message",
        "reminder": "reminder_message",
        "memory_update": "memory_update_message",
        "error": "error_message",
    }
    if message.kind in by_kind:
        return by_kind[message.kind]
    return {
        "user": "user_message",
        "assistant": "assistant_message",
        "tool": "tool_return_message",
        "system": "system_message",
    }[message.role]


def _search_text(*parts: str | None) -> str:
    return normalize("\n".join(p for p in parts if p))


def project(
    message_id: str,
    message: Message,
    metadata: Mapping[str, Any],
    created_at: str,
    agent_id: str | None,
    conversation_id: str | None,
) -> list[Projected]:
    """The search candidates of one stored message, in order (part k is dated base + k ms)."""
    base = _base_date(metadata, created_at)

    def date(k: int) -> str:
        return format_time(base + timedelta(milliseconds=k)) if base is not None else EPOCH

    message_type = _type_of(message)
    if message_type == "summary_message":
        compaction = metadata.get("compaction")
        raw = compaction.get("summary") if isinstance(compaction, Mapping) else None
        summary = raw if isinstance(raw, str) else message.content
        fields: dict[str, Any] = {
            "id": message_id,
            "date": date(0),
            "agent_id": agent_id,
            "conversation_id": conversation_id,
            "message_type": message_type,
            "summary": summary,
        }
        stats = compaction.get("stats") if isinstance(compaction, Mapping) else None
        if stats is not None:
            fields["compaction_stats"] = stats
        return [Projected(0, message_type, message_id, date(0), fields, _search_text(message_type, summary))]
    if message_type == "tool_return_message":
        fields = {
            "id": message_id,
            "date": date(0),
            "message_type": message_type,
            "tool_call_id": message.tool_call_id,
            "name": message.name,
            "tool_return": message.content,
        }
        return [
            Projected(
                0, message_type, message_id, date(0), fields, _search_text(message_type, message.content)
            )
        ]
    parts: list[Projected] = []
    if message.content or not message.tool_calls:
        fields = {"id": message_id, "date": date(0), "message_type": message_type, "content": message.content}
        if message_type == "memory_update_message" and "memfs_revision" in metadata:
            fields["memfs_revision"] = metadata["memfs_revision"]
        parts.append(
            Projected(
                0, message_type, message_id, date(0), fields, _search_text(message_type, message.content)
            )
        )
    for call in message.tool_calls:
        k = len(parts)
        call_id = f"{message_id}:tool:{call.id}:request"
        fields = {
            "id": call_id,
            "date": date(k),
            "message_type": "tool_call_message",
            "tool_call": {"name": call.name, "arguments": call.arguments, "tool_call_id": call.id},
        }
        text = _search_text("tool_call_message", call.name, call.arguments)
        parts.append(Projected(k, "tool_call_message", call_id, date(k), fields, text))
    return parts

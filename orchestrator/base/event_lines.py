"""One human line per event, for every kind of ``docs/events.md`` (V2): what ``reverie events``
prints after the time and the task or conversation, for a chat session's store and a batch run's log.

Each kind names its most useful fields in a fixed order: an id first (turn, tool call, compaction,
reflection), then ``name=value`` pairs with empty ones left out. A ``model.call`` says whose call it
was first (``chat``, ``summarize``, ``reflect``, ``resolve``, ``replay``), a ``memory.commit`` its
short commit, its source as the session saw it, what the commit's trailers say (``from=``) and its
files. A kind this version does not know is still printed as
``name=value`` pairs, never as raw JSON.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

__all__ = ["LINE_LIMIT", "event_detail"]

LINE_LIMIT = 200
"""A detail longer than this is cut, ending in ``…``."""

_FIELDS: Mapping[str, tuple[str, ...]] = {
    "turn.start": ("turn_id",),
    "turn.end": ("turn_id", "status", "steps", "error"),
    "text.delta": ("text",),
    "model.retry": ("message",),
    "tool.start": ("name", "call_id", "arguments"),
    "tool.end": ("name", "call_id", "ok", "output"),
    "memory.update_injected": ("revision", "previous_revision"),
    "reminder.queued": ("key", "status"),
    "memory.sync_failed": ("error",),
    "memory.warning": ("message",),
    "compaction.start": ("compaction_id", "mode", "messages", "tokens_before", "background"),
    "compaction.progress": ("step",),
    "compaction.done": ("compaction_id", "mode", "evicted", "tokens_before", "tokens_after"),
    "compaction.failed": ("compaction_id", "evicted", "trigger", "error"),
    "compaction.cancelled": ("compaction_id", "reason"),
    "compaction.superseded": ("compaction_id", "reason"),
    "reflection.launch": ("reflection_id", "trigger", "branch"),
    "reflection.merged": ("reflection_id", "outcome", "commits", "revision"),
    "reflection.kept": ("reflection_id", "reason_code", "commits", "files", "reason"),
    "reflection.pending": ("reflection_id", "reason_code", "commits", "turns", "reason"),
    "reflection.bypassed": ("reflection_id", "commits"),
    "reflection.failed": ("reflection_id", "commits", "error"),
    "reflection.merging": ("reflection_id",),
    "reflection.outcome": ("reflection_id", "outcome", "commits", "files", "reason_code", "reason", "error"),
    "reflection.review": ("reflection_id", "commits", "added", "removed", "files"),
    "reflection.decided": ("reflection_id", "decision", "by", "why", "outcome", "commits", "revision"),
    "subagent.failed": ("name", "error"),
    "task.start": ("task", "pid"),
    "task.end": ("status", "checks_passed", "error"),
}
_IDS = frozenset({"turn_id", "compaction_id", "reflection_id"})
_SHORT = frozenset({"revision", "previous_revision"})


def _value(name: str, value: Any) -> str:
    if name in _SHORT and isinstance(value, str) and len(value) == 40:
        return value[:12]
    if name == "files" and isinstance(value, Sequence) and not isinstance(value, str):
        return ",".join(_file(item) for item in value)
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, Sequence) and not isinstance(value, str):
        return ",".join(_value(name, item)[:12] for item in value)
    if isinstance(value, Mapping):
        return ",".join(f"{k}:{v}" for k, v in value.items())
    return " ".join(str(value).split())


def _file(item: Any) -> str:
    """A path, or ``path+added-removed`` for a held reflection's ``[path, added, removed]``."""
    if isinstance(item, Sequence) and not isinstance(item, str) and len(item) == 3:
        return f"{item[0]}+{item[1]}-{item[2]}"
    return str(item)


def _pairs(payload: Mapping[str, Any], names: Sequence[str]) -> list[str]:
    shown = []
    for name in names:
        value = payload.get(name)
        if value is None or value == "" or value == [] or value == ():
            continue
        text = _value(name, value)
        shown.append(text if name in _IDS or name == "name" else f"{name}={text}")
    return shown


def _model_call(p: Mapping[str, Any]) -> list[str]:
    usage = f"in={p.get('prompt_tokens')} out={p.get('completion_tokens')} {p.get('latency_ms')}ms"
    extra = _pairs(p, ("finish_reason", "tool_calls"))
    return [str(p.get("purpose") or "chat"), str(p.get("model")), usage, *extra]


def _memory_commit(p: Mapping[str, Any]) -> list[str]:
    source = str(p.get("source") or "turn")
    by = p.get("by")
    who = f"{source}:{' '.join(str(by).split())}" if by else source
    head = [_value("revision", p.get("revision")), who]
    said = p.get("provenance")
    if isinstance(said, Mapping) and said.get("source"):
        conversation = f"@{said['conversation']}" if said.get("conversation") else ""
        head.append(f"from={said['source']}{conversation}")
    if p.get("operation") == "delete":
        head.append("delete")
    return head + _pairs(p, ("files", "previous_revision"))


def event_detail(kind: str, payload: Mapping[str, Any]) -> str:
    """The line's detail for an event of ``kind`` (at most ``LINE_LIMIT`` characters)."""
    if kind == "model.call":
        parts = _model_call(payload)
    elif kind == "memory.commit":
        parts = _memory_commit(payload)
    else:
        names = _FIELDS.get(kind) or tuple(sorted(payload))
        parts = _pairs(payload, names)
    detail = " ".join(parts)
    return detail if len(detail) <= LINE_LIMIT else detail[: LINE_LIMIT - 1] + "…"

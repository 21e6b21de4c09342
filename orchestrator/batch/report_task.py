"""One task's detail for the HTML report: the transcript rebuilt from its conversation store, the
memory diff from the task's base to its final HEAD, the memory history between them (V4: each
change with the source its commits' trailers name, a reflection's commits as one change with its
own diff), reflections, compactions and the timeline.

Reads only what a finished run left on disk (the store opened read-only, git plumbing in the
memory repository, the task's event log), so a report can be written while nothing runs and
never changes the run. Everything is capped: a report stays small enough to open however
chatty a task was, and each cut says so.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from orchestrator.batch.eventlog import EventRecord
from orchestrator.memfs.errors import GitError
from orchestrator.memfs.gitdir import is_repository
from orchestrator.memfs.history import Change, changes, first_parents, line_counts, patch, root_commit
from orchestrator.store.finished import read_finished, read_reflection_rows
from orchestrator.store.records import StoreDamaged

__all__ = [
    "MAX_EVENTS",
    "MAX_HISTORY",
    "MAX_MESSAGE_CHARS",
    "MAX_PATCH_CHARS",
    "compactions_of",
    "event_brief",
    "memory_diff",
    "memory_history",
    "reflections_of",
    "task_detail",
    "transcript",
]

MAX_MESSAGE_CHARS = 20_000
MAX_PATCH_CHARS = 200_000
MAX_EVENTS = 2_000
MAX_HISTORY = 500
"""At most this many changes of a task's memory history are listed (the newest); the rest are counted."""


def _clip(text: str, limit: int) -> str:
    if len(text) <= limit:
        return text
    return text[:limit] + f"\n[… {len(text) - limit:,} more characters not shown in the report]"


def _json(text: str | None, default: Any) -> Any:
    try:
        return json.loads(text) if text else default
    except ValueError:
        return default


def transcript(store: Path) -> dict[str, Any]:
    """Turns of every conversation with their messages and tool calls (blocking). A message that
    is no longer in the context (evicted by a compaction) is marked ``evicted``; a compaction's
    summary message carries its stats. ``{"error": ...}`` when the store cannot be read."""
    if not store.is_file():
        return {"conversations": [], "error": f"no conversation store at {store}"}
    try:
        found = read_finished(store)
    except StoreDamaged as exc:
        return {"conversations": [], "error": str(exc)}
    if not found.has_messages:
        return {"conversations": [], "error": f"{store}: no messages table"}
    in_context, statuses, rows = found.in_context, found.turns, found.messages
    conversations: list[dict[str, Any]] = [
        {"id": cid, "agent_id": agent, "hidden": bool(hidden), "turns": []} for cid, agent, hidden in found.conversations
    ]
    by_conv = {c["id"]: c for c in conversations}
    for seq, mid, conv_id, role, kind, content, calls, call_id, name, meta_text, at, turn_id in rows:
        conv = by_conv.get(conv_id)
        if conv is None:
            conv = by_conv[conv_id] = {"id": conv_id, "agent_id": None, "hidden": False, "turns": []}
            conversations.append(conv)
        turns: list[dict[str, Any]] = conv["turns"]
        if not turns or turns[-1]["id"] != turn_id:
            status, error = statuses.get(turn_id or "", ("", None))
            turns.append({"id": turn_id, "status": status, "error": error, "messages": []})
        meta = _json(meta_text, {})
        message: dict[str, Any] = {
            "seq": seq,
            "role": role,
            "kind": kind,
            "content": _clip(content or "", MAX_MESSAGE_CHARS),
            "at": at,
            "evicted": mid not in in_context,
        }
        tool_calls = _json(calls, [])
        if tool_calls:
            message["tool_calls"] = [
                {
                    "id": c.get("id"),
                    "name": c.get("name"),
                    "arguments": _clip(str(c.get("arguments", "")), MAX_MESSAGE_CHARS),
                }
                for c in tool_calls
                if isinstance(c, Mapping)
            ]
        if call_id:
            message["tool_call_id"] = call_id
            message["name"] = name
            message["ok"] = meta.get("ok")
        if isinstance(meta.get("compaction"), Mapping):
            stats = meta["compaction"].get("stats") or {}
            message["compaction"] = {
                k: stats.get(k)
                for k in ("trigger", "context_tokens_before", "context_tokens_after", "messages_count_before",
                          "messages_count_after")
            }
        if meta.get("copy_of"):
            message["copy_of"] = meta["copy_of"]
        turns[-1]["messages"].append(message)
    for conv in conversations:
        conv["messages"] = sum(len(t["messages"]) for t in conv["turns"])
    return {"conversations": conversations, "error": None}


def memory_diff(memory: Path, base: str | None, head: str | None) -> dict[str, Any]:
    """Files and lines changed from ``base`` (the task's seeded first commit; its root commit when
    the result does not say) to ``head`` (blocking)."""
    out: dict[str, Any] = {"base": base, "head": head, "files": [], "patch": "", "error": None}
    if head is None:
        out["error"] = "the task has no final memory HEAD"
        return out
    if not _has_repository(memory):
        out["error"] = f"no memory repository at {memory}"
        return out
    if base is None:
        base = out["base"] = root_commit(memory, head)
    if base is None or base == head:
        return out
    try:
        changes = line_counts(memory, base, head)
    except GitError as error:
        out["error"] = error.stderr.strip() or "git diff failed"
        return out
    out["files"] = [{"path": c.path, "added": c.added, "removed": c.removed} for c in changes]
    out["patch"] = _clip(patch(memory, base, head) or "", MAX_PATCH_CHARS)
    return out


def _has_repository(memory: Path) -> bool:
    return is_repository(memory) or (memory / "HEAD").exists()


def memory_history(memory: Path, base: str | None, head: str | None) -> dict[str, Any]:
    """The changes from ``base`` (exclusive; the whole history when None) to ``head``, newest
    first, as ``reverie memory log`` groups them (H2), each with the source its commits' own
    trailers name; a reflection's change also carries its diff (blocking). The diffs share one
    budget of ``MAX_PATCH_CHARS``."""
    out: dict[str, Any] = {"changes": [], "cut": 0, "error": None}
    if head is None or not _has_repository(memory):
        out["error"] = "the task has no final memory HEAD" if head is None else f"no memory repository at {memory}"
        return out
    found = changes(memory, revision=head if base is None else f"{base}..{head}")
    out["cut"] = max(0, len(found) - MAX_HISTORY)
    budget = MAX_PATCH_CHARS
    for change in found[:MAX_HISTORY]:
        item = _change_item(change)
        if change.provenance.reflection and budget > 0:
            item["patch"] = _clip(_reflection_patch(memory, change.commits) or "", budget)
            budget -= len(item["patch"])
        elif change.provenance.reflection:
            item["patch"] = "[diff not shown: the report's diffs of this task are at their limit]"
        out["changes"].append(item)
    return out


def _change_item(change: Change) -> dict[str, Any]:
    said = change.provenance
    return {
        "at": datetime.fromtimestamp(change.time, UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
        "source": said.source,
        "sources": list(change.sources),
        "commits": list(change.commits),
        "subject": change.subject,
        "provenance": said.as_dict(),
        "files": [{"path": f.path, "added": f.added, "removed": f.removed} for f in change.files],
    }


def _reflection_patch(memory: Path, commits: Sequence[str]) -> str | None:
    """What a reflection's commits (newest first) changed: one diff when they follow each other on
    the first-parent line (merge-back puts them there), else each commit's own diff in turn."""
    line = first_parents(memory, commits[0], len(commits) + 1)
    if tuple(line[: len(commits)]) == tuple(commits):
        return patch(memory, line[len(commits)] if len(line) > len(commits) else None, commits[0])
    parts = []
    for commit in reversed(commits):
        parents = first_parents(memory, commit, 2)
        parts.append(patch(memory, parents[1] if len(parents) > 1 else None, commit) or "")
    return "".join(parts)


def reflections_of(store: Path, events: Sequence[EventRecord]) -> list[dict[str, Any]]:
    """The store's reflection records (status, reason, files, commits) when it has them, else what
    the events say; each with its outcome."""
    found: dict[str, dict[str, Any]] = {}
    for record in events:
        if not record.kind.startswith("reflection."):
            continue
        rid = str(record.payload.get("reflection_id", ""))
        item = found.setdefault(rid, {"id": rid, "trigger": None, "status": "running", "reason": None,
                                      "files": [], "commits": [], "branch": None, "at": record.at})
        outcome = record.kind.split(".", 1)[1]
        if outcome == "launch":
            item["trigger"] = record.payload.get("trigger")
        else:
            item["status"] = outcome
        for key in ("branch", "reason", "files", "commits"):
            if record.payload.get(key):
                item[key] = record.payload[key]
        if record.payload.get("error"):
            item["reason"] = record.payload["error"]
    try:
        rows = read_reflection_rows(store) if store.is_file() else ()
    except StoreDamaged:
        rows = ()
    for rid, trigger, status, reason, branch, commits, files in rows:
        item = found.setdefault(rid, {"id": rid, "at": None})
        item.update({"trigger": trigger, "status": status, "reason": reason, "branch": branch,
                     "commits": _json(commits, []), "files": _json(files, [])})
    return list(found.values())


def compactions_of(events: Sequence[EventRecord]) -> list[dict[str, Any]]:
    """Each compaction with its mode, evicted messages and tokens before/after (failed ones too)."""
    out = []
    for record in events:
        if record.kind not in ("compaction.done", "compaction.failed"):
            continue
        p = record.payload
        raw_stats = p.get("stats")
        stats: Mapping[str, Any] = raw_stats if isinstance(raw_stats, Mapping) else {}
        out.append({
            "at": record.at,
            "status": record.kind.split(".", 1)[1],
            "mode": p.get("mode"),
            "evicted": p.get("evicted"),
            "tokens_before": p.get("tokens_before"),
            "tokens_after": p.get("tokens_after"),
            "trigger": stats.get("trigger"),
            "error": p.get("error"),
        })
    return out


def event_brief(record: EventRecord) -> str:
    """A short human description of an event's payload, for the timeline."""
    p = record.payload
    if record.kind == "model.call":
        return (f"{p.get('purpose', 'chat')} · {p.get('model')} · in {p.get('prompt_tokens')} "
                f"out {p.get('completion_tokens')} · {p.get('latency_ms')} ms")
    if record.kind in ("tool.start", "tool.end"):
        return str(p.get("name")) + ("" if record.kind == "tool.start" else f" ok={p.get('ok')}")
    if record.kind == "turn.end":
        return f"{p.get('status')} · {p.get('steps')} steps" + (f" · {p['error']}" if p.get("error") else "")
    if record.kind == "compaction.done":
        return f"{p.get('mode')} · evicted {p.get('evicted')} · {p.get('tokens_before')} → {p.get('tokens_after')} tokens"
    if record.kind in ("memory.commit", "memory.update_injected"):
        return f"{str(p.get('previous_revision') or '')[:8]} → {str(p.get('revision') or '')[:8]}"
    if record.kind == "task.start":
        return json.dumps(p.get("settings") or {}, ensure_ascii=False)
    text = json.dumps(dict(p), ensure_ascii=False, default=str, separators=(",", ":"))
    return text if len(text) <= 300 else text[:299] + "…"


def task_detail(
    result: Mapping[str, Any], events: Sequence[EventRecord], *, store: Path, memory: Path
) -> dict[str, Any]:
    """Everything the report shows when a task is opened (blocking)."""
    timeline = [{"at": r.at, "kind": r.kind, "text": event_brief(r)} for r in events[:MAX_EVENTS]]
    return {
        "checks": [dict(c) for c in result.get("checks", ())],
        "final_answer": _clip(str(result.get("final_answer") or ""), MAX_MESSAGE_CHARS),
        "error": result.get("error"),
        "settings": dict(result.get("settings") or {}),
        "transcript": transcript(store),
        "diff": memory_diff(memory, result.get("memory_base"), result.get("memory_head")),
        "history": memory_history(memory, result.get("memory_base"), result.get("memory_head")),
        "reflections": reflections_of(store, events),
        "compactions": compactions_of(events),
        "timeline": timeline,
        "timeline_cut": max(0, len(events) - MAX_EVENTS),
    }

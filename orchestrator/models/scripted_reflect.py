"""The scripted model's reflection: what in a transcript is new to memory, and the commit of it.

A reflection reads the transcript's user lines (tagged lines, JSON records, or plain lines), or,
when the transcript is offered as a file to read in slices, asks for each slice in turn and keeps
what it found as ``Notes from lines`` replies (the request carries them, since older tool results
get trimmed). Items already in memory are skipped; the rest are saved in one bash call.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable
from typing import Any

from .scripted_request import (
    Turn,
    call_id,
    is_reminder,
    last_turn,
    offers,
    own_call,
    tool_ok,
    user_text,
)
from .scripted_rules import memory_lines, reflection_command, stated_rule
from .types import Message, ModelRequest, ToolCall

__all__ = ["ABOUT_ME_MAX", "ABOUT_ME_PER_REFLECTION", "reflect"]


_FACT = re.compile(r"^(?:my name is|i prefer|i like|i use|call me|我叫|我喜欢|我更喜欢|我习惯|我用)", re.I)


_ABOUT_ME = re.compile(
    r"^(?:i(?:'m|'ve| am| was| have| had| live| lived| work| worked| moved| graduated| bought| got| started"
    r"| finished| own| spent| visited| went| recently| just| usually| always| never| love| hate| enjoy)\b"
    r"|my\s+(?:[a-z'-]+\s+){0,2}(?:is|was|are|were)\b)",
    re.I,
)
"""A sentence in which the user states something about themselves, in the first person."""


_SENTENCE_END = re.compile(r"(?<=[.!])\s+")


ABOUT_ME_MAX = 160
"""Longer first-person sentences are narration, not a fact worth a memory line."""


ABOUT_ME_PER_REFLECTION = 6
"""At most this many such sentences per reflection: memory keeps the user's facts, not the transcript."""


_ROLE_TAG = re.compile(r"^\s*(?:\[(user|assistant|tool|reasoning|error)\]|(user|assistant|tool)\s*:)\s*(.*)$", re.I)


def _json_user_texts(text: str) -> list[str]:
    try:
        data: Any = json.loads(text)
    except ValueError:
        return []
    found: list[str] = []

    def walk(node: Any) -> None:
        if isinstance(node, dict):
            role = node.get("role") or node.get("kind") or node.get("type")
            content = node.get("content", node.get("text"))
            if role in ("user", "user_message") and isinstance(content, str):
                found.append(content.strip())
                return
            for value in node.values():
                walk(value)
        elif isinstance(node, list):
            for value in node:
                walk(value)

    walk(data)
    return [item for item in found if item]


def _user_lines_in(text: str) -> list[str]:
    """User-authored lines of one transcript text (tagged lines, JSON records, or plain lines)."""
    records = _json_user_texts(text)
    if records:
        return records
    lines: list[str] = []
    tagged = False
    for line in text.splitlines():
        json_line = _json_user_texts(line) if line.lstrip().startswith("{") else []
        if json_line:
            lines.extend(json_line)
            tagged = True
            continue
        match = _ROLE_TAG.match(line)
        if match:
            tagged = True
            if (match.group(1) or match.group(2) or "").lower() == "user" and match.group(3).strip():
                lines.append(match.group(3).strip())
    if not tagged:
        lines.extend(line.strip() for line in text.splitlines() if line.strip())
    return lines


def _transcript_user_lines(request: ModelRequest) -> list[str]:
    """User-authored lines of the transcripts in the request's non-reminder user messages."""
    lines: list[str] = []
    for message in request.messages:
        if message.role != "user" or is_reminder(message):
            continue
        lines.extend(_user_lines_in(user_text(message)))
    return lines


_READ_IN_SLICES = re.compile(
    r"\$TRANSCRIPT_PATH = (?P<path>.+?) \((?P<total>[\d,]+) lines.*?read_file in slices of at most (?P<per>\d+) lines",
    re.S,
)


_NOTES_HEAD = re.compile(r"^Notes from lines \d+-\d+:", re.M)


_PROGRESS = re.compile(r"furthest transcript line read so far is (\d+)")


_NUMBERED = re.compile(r"^\s*\d+\t", re.M)


def reflect(request: ModelRequest) -> Turn:
    """The next step of a reflection: read the next slice, save what is new, or report on the save."""
    last = last_turn(request)
    if last is not None and last.role == "tool":
        call = own_call(request, last.tool_call_id)
        if call is not None and call.name == "bash":
            if tool_ok(last.content):
                first = next((line for line in last.content.splitlines() if line.strip()), "")
                return Turn(f"Reflection: saved new memory and committed it ({first.strip()}).")
            return Turn(
                f"Reflection failed: the memory commit did not succeed: {' '.join(last.content.split())[:200]}"
            )
    known = {line.casefold() for line in memory_lines(request)}
    reading = _READ_IN_SLICES.search(next((m.content for m in request.messages if m.role == "user"), ""))
    note = ""
    if reading is not None and offers(request, "read_file"):
        step, note = _read_next_slice(request, reading, last)
        if step is not None:
            return step
        lines = _noted_items(request, note)
    else:
        lines = _transcript_user_lines(request)
    items = _new_items(lines, known)
    if not items:
        return Turn("Reflection: nothing new to remember.")
    if not offers(request, "bash"):
        return Turn("Reflection: found new items but no bash tool to save them: " + "; ".join(items))
    layout_v1 = "system/persona.md" in request.system
    arguments = json.dumps({"command": reflection_command(items, layout_v1)}, ensure_ascii=False)
    saving = f"Saving {len(items)} item(s) to memory."
    return Turn(f"{note}\n{saving}" if note else saving, (ToolCall(call_id(request), "bash", arguments),))


def _new_items(lines: Iterable[str], known: set[str]) -> list[str]:
    items: list[str] = []
    about_me = 0
    for line in lines:
        rule = stated_rule(line) or (" ".join(line.split()).rstrip(".。") if _FACT.match(line) else None)
        found = [rule] if rule else []
        if not found and about_me < ABOUT_ME_PER_REFLECTION:
            found = [s for s in _about_me(line) if s.casefold() not in known][: ABOUT_ME_PER_REFLECTION - about_me]
            about_me += len(found)
        for item in found:
            if item.casefold() not in known and item not in items:
                items.append(item)
    return items


def _about_me(line: str) -> list[str]:
    """The first-person statements of fact in a user line (``_ABOUT_ME``), not its questions."""
    out = []
    for sentence in _SENTENCE_END.split(" ".join(line.split())):
        sentence = sentence.strip()
        if "?" in sentence or len(sentence) > ABOUT_ME_MAX or not _ABOUT_ME.match(sentence):
            continue
        out.append(sentence.rstrip(".!"))
    return out


def _slice_items(result: Message) -> list[str]:
    """Facts and rules in one ``read_file`` slice of a transcript (its line numbers stripped)."""
    return _new_items(_user_lines_in(_NUMBERED.sub("", result.content)), set())


def _read_next_slice(
    request: ModelRequest, reading: re.Match[str], last: Message | None
) -> tuple[Turn | None, str]:
    """While slices remain unread: note what the newest slice held, then ask for the next one.

    Stateless (S27): the slices read so far are the request's own ``read_file`` calls; what they
    held survives in its ``Notes from lines`` replies, since older results get trimmed."""
    path, total, per = reading["path"], int(reading["total"].replace(",", "")), int(reading["per"])
    offsets = [
        int(args.get("offset") or 1)
        for m in request.messages
        for call in m.tool_calls
        if call.name == "read_file" and isinstance(args := _json_object(call.arguments), dict)
        and args.get("path") == path
    ]
    progress = _PROGRESS.search(next((m.content for m in request.messages if m.role == "user"), ""))
    following = max([o + per for o in offsets] + [int(progress.group(1)) + 1 if progress else 1])
    note = ""
    if last is not None and last.role == "tool":
        call = own_call(request, last.tool_call_id)
        if call is not None and call.name == "read_file":
            start = int(_json_object(call.arguments).get("offset") or 1)
            items = _slice_items(last)
            end = min(total, start + per - 1)
            if items:
                note = f"Notes from lines {start}-{end}:" + "".join(f"\n- {item}" for item in items)
    if following > total:
        return None, note
    arguments = json.dumps({"path": path, "offset": following, "limit": per}, ensure_ascii=False)
    return Turn(note, (ToolCall(call_id(request), "read_file", arguments),)), note


def _noted_items(request: ModelRequest, note: str) -> list[str]:
    """Every item of the ``Notes from lines`` replies in the request, and of ``note``."""
    items: list[str] = []
    for text in [*(m.content for m in request.messages if m.role in ("assistant", "user")), note]:
        if _NOTES_HEAD.search(text):
            items.extend(line[2:].strip() for line in text.splitlines() if line.startswith("- "))
    return items


def _json_object(text: str) -> dict[str, Any]:
    try:
        data = json.loads(text)
    except ValueError:
        return {}
    return data if isinstance(data, dict) else {}

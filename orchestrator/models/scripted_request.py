"""Readers of a request that every purpose of the scripted model shares.

The scripted model is stateless (S27): each answer is a function of the request alone, so what a
purpose knows is what these readers find in it (the reminders, the rule sources, the last turn,
the tools offered, the call a tool result answers). They live apart from the purposes
(:mod:`.scripted` for chat, :mod:`.scripted_reflect`, :mod:`.scripted_summarize`,
:mod:`.scripted_resolve`) so that each purpose is a module of its own that reads a request the
same way.
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass

from .types import Message, ModelRequest, ToolCall

__all__ = [
    "REMINDER_BLOCK",
    "STOPWORDS",
    "Turn",
    "call_id",
    "is_reminder",
    "last_turn",
    "offers",
    "own_call",
    "rule_sources",
    "tool_ok",
    "user_text",
]


REMINDER_BLOCK = re.compile(r"<system-reminder>.*?</system-reminder>", re.S)


STOPWORDS = frozenset(
    "a an the my me i you we us our your about of on in at to for with what when where which who how did do does "
    "is are was were say said tell told that this it earlier before previously remember please".split()
)


def is_reminder(message: Message) -> bool:
    """Whether ``message`` is reminder text only (a reminder, a memory update, or a user message of
    reminder blocks alone)."""
    if message.kind in ("reminder", "memory_update"):
        return True
    return (
        message.role == "user"
        and not REMINDER_BLOCK.sub("", message.content).strip()
        and bool(message.content)
    )


def user_text(message: Message) -> str:
    """What the user wrote in ``message``, its reminder blocks left out."""
    return REMINDER_BLOCK.sub("", message.content).strip()


def rule_sources(request: ModelRequest) -> list[str]:
    """The texts rules may come from: the system prompt, reminders, memory updates and reminder
    blocks inside user messages (never plain user text)."""
    sources = [request.system] if request.system else []
    for message in request.messages:
        if message.kind in ("reminder", "memory_update") or message.role == "system":
            sources.append(message.content)
        elif message.role == "user":
            sources.extend(REMINDER_BLOCK.findall(message.content))
    return sources


@dataclass(frozen=True)
class Turn:
    """One scripted reply: its text and the tool calls it makes."""

    text: str
    tool_calls: tuple[ToolCall, ...] = ()


def call_id(request: ModelRequest) -> str:
    """A tool call id that is a function of the request, so a replayed request gets the same id."""
    digest = hashlib.sha256()
    digest.update(request.purpose.encode() + b"\0" + request.system.encode())
    for message in request.messages:
        digest.update(b"\0" + message.role.encode() + b"\0" + message.content.encode())
        for call in message.tool_calls:
            digest.update(b"\0" + call.id.encode())
    return "call_" + digest.hexdigest()[:12]


def offers(request: ModelRequest, name: str) -> bool:
    """Whether the request offers the tool ``name``."""
    return any(tool.name == name for tool in request.tools)


def last_turn(request: ModelRequest) -> Message | None:
    """The newest message that is not reminder text, or None."""
    for message in reversed(request.messages):
        if not is_reminder(message):
            return message
    return None


def own_call(request: ModelRequest, call_id: str | None) -> ToolCall | None:
    """The assistant tool call with id ``call_id`` in the request, or None."""
    for message in request.messages:
        for call in message.tool_calls:
            if call.id == call_id:
                return call
    return None


def tool_ok(result: str) -> bool:
    """Whether a tool result reads as a success (no error word, exit code 0 if one is given)."""
    if re.search(r"\bfatal:|\berror\b", result, re.I):
        return False
    code = re.search(r"exit(?:ed with)?(?: code| status)?[:= ]+(\d+)", result, re.I)
    return not (code and code.group(1) != "0")

"""Message builders in the shorthand of COMPACTION-9 (U, A, A*, T, alt)."""

from __future__ import annotations

from orchestrator.models.types import Message, ToolCall


def U(text: str = "xxxx") -> Message:
    return Message(role="user", content=text)


def A(text: str = "xxxx") -> Message:
    return Message(role="assistant", content=text)


def AS(
    name: str = "Bash", arguments: str = '{"command":"ls"}', call_id: str = "c1", text: str = ""
) -> Message:
    return Message(role="assistant", content=text, tool_calls=(ToolCall(call_id, name, arguments),))


def T(text: str = "ok", call_id: str = "c1") -> Message:
    return Message(role="tool", content=text, tool_call_id=call_id)


def reminder(text: str = "<system-reminder>hi</system-reminder>") -> Message:
    return Message(role="user", content=text, kind="reminder")


def memory_update(
    text: str = "<system-reminder>\n<memory_update>\nx\n</memory_update>\n</system-reminder>",
) -> Message:
    return Message(role="user", content=text, kind="memory_update")


def alt(n: int, c: int = 4) -> list[Message]:
    return [U("x" * c) if i % 2 == 0 else A("x" * c) for i in range(n)]

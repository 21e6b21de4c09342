"""The values that cross the model seam: messages, tool calls, tool schemas, requests, responses.

Kept free of any provider's wire format so the turn loop, the store and compaction share one
vocabulary; ``openai_client`` and ``scripted`` translate at the edge.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol

from orchestrator.base.errors import ReverieError

__all__ = [
    "Message",
    "MessageKind",
    "ModelClient",
    "ModelError",
    "ModelRequest",
    "ModelResponse",
    "Purpose",
    "Role",
    "TextSink",
    "ToolCall",
    "ToolSpec",
    "Usage",
    "is_context_overflow_text",
]

Role = Literal["system", "user", "assistant", "tool"]
MessageKind = Literal["message", "reminder", "memory_update", "summary", "error"]
Purpose = Literal["chat", "summarize", "reflect", "resolve"]
TextSink = Callable[[str], Awaitable[None]]


@dataclass(frozen=True)
class ToolCall:
    """One call the model asked for; ``arguments`` is the raw JSON text as the model sent it."""

    id: str
    name: str
    arguments: str


@dataclass(frozen=True)
class Message:
    """One entry of a conversation.

    ``kind`` is reverie's own classification (a reminder and a user message are both role ``user``);
    providers only ever see ``role``, ``content``, ``tool_calls`` and ``tool_call_id``.
    """

    role: Role
    content: str
    tool_calls: tuple[ToolCall, ...] = ()
    tool_call_id: str | None = None
    name: str | None = None
    kind: MessageKind = "message"


@dataclass(frozen=True)
class ToolSpec:
    """A tool as offered to the model: its name, description and JSON-schema parameters."""

    name: str
    description: str
    parameters: Mapping[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class Usage:
    """Tokens a provider reported for one request (0 where it reported none)."""

    prompt_tokens: int = 0
    completion_tokens: int = 0


@dataclass(frozen=True)
class ModelRequest:
    """Everything one model call needs. ``system`` is sent as the first message when non-empty."""

    system: str
    messages: tuple[Message, ...]
    tools: tuple[ToolSpec, ...] = ()
    model: str = ""
    purpose: Purpose = "chat"
    tool_choice: str | None = None
    max_tokens: int | None = None


@dataclass(frozen=True)
class ModelResponse:
    """The assistant message of one call, its usage and why it stopped. ``replayed``: a recorded
    reply given back without a provider call (``orchestrator.models.recorded``); its usage is the
    estimate a live call would have reported, so context is counted as live, but no one paid it."""

    message: Message
    usage: Usage = Usage()
    finish_reason: str = "stop"
    model: str = ""
    replayed: bool = False


class ModelError(ReverieError):
    """A model call that failed after retries.

    ``transient`` marks errors worth retrying (429, 5xx, timeouts, resets); ``context_overflow``
    marks a request too large for the model's window, which compaction answers by shrinking.
    ``partial_text``: what a response cut by a bound (D12) had said, already capped.
    """

    def __init__(
        self,
        message: str,
        *,
        transient: bool = False,
        context_overflow: bool = False,
        status: int | None = None,
        retry_after: float | None = None,
        partial_text: str = "",
    ) -> None:
        super().__init__(message)
        self.transient = transient
        self.context_overflow = context_overflow
        self.status = status
        self.retry_after = retry_after
        self.partial_text = partial_text


class ModelClient(Protocol):
    """The one seam every model sits behind.

    ``on_text`` receives streamed assistant text as it arrives; the returned response always holds
    the whole message, so callers that do not stream ignore it.
    """

    async def complete(self, request: ModelRequest, *, on_text: TextSink | None = None) -> ModelResponse: ...


_OVERFLOW_MARKERS = (
    "context_length_exceeded",
    "context window",
    "maximum context length",
    "max context length",
    "prompt is too long",
    "input is too long",
    "too many tokens",
    "exceeds the context",
    "exceeded the context",
    "reduce the length",
    "request too large",
    "request_too_large",
    "model_context_window_exceeded",
    "exceed_context_size_error",
    "exceeds the available context size",
)


def is_context_overflow_text(text: str) -> bool:
    """COMPACTION-5.3's substrings, case-insensitive, plus llama.cpp's ``exceed_context_size_error``."""
    lowered = text.lower()
    return any(marker in lowered for marker in _OVERFLOW_MARKERS)

"""A model client that reports every call it makes as a ``model.call`` event.

The turn loop reports its own chat calls; subagents (summarizer, reflection, resolver) talk to the
model through this wrapper, so every call of every purpose lands in the store and the batch event
logs with its agent and conversation, and batch totals can count what subagents cost. A failed call
has no usage and reports nothing; the failure is the caller's to record.
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable

from orchestrator.base.events import ModelCalled
from orchestrator.models.types import ModelClient, ModelRequest, ModelResponse, TextSink

__all__ = ["CallSink", "MeteredModel"]

CallSink = Callable[[ModelCalled], Awaitable[None]]


class MeteredModel:
    """``ModelClient`` around ``inner``; ``on_call`` receives one ``ModelCalled`` per answered call.

    Attributes other than ``complete`` (``on_retry``, ``model`` ...) are the inner client's, so a
    wrapped client behaves as the inner one everywhere else."""

    def __init__(self, inner: ModelClient, on_call: CallSink) -> None:
        self.inner = inner
        self.on_call = on_call

    def __getattr__(self, name: str) -> object:
        return getattr(self.inner, name)

    async def complete(self, request: ModelRequest, *, on_text: TextSink | None = None) -> ModelResponse:
        started = time.perf_counter()
        response = await self.inner.complete(request, on_text=on_text)
        await self.on_call(
            ModelCalled(
                model=response.model or request.model,
                prompt_tokens=response.usage.prompt_tokens,
                completion_tokens=response.usage.completion_tokens,
                latency_ms=round((time.perf_counter() - started) * 1000, 3),
                purpose=request.purpose,
                finish_reason=response.finish_reason,
                tool_calls=len(response.message.tool_calls),
                request_model=request.model,
            )
        )
        return response

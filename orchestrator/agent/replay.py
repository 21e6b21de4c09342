"""A recorded assistant reply standing in for the model, so recorded history replays as live turns.

A suite task's ``history`` (docs/suite-format.md) is sent turn by turn through the same turn loop as
a live message: the reminders, the compaction check before the request, the stored messages, the
post-turn sync and the after-turn hooks (reflection triggers) all run. Only the chat request itself
is answered from the recording. Its usage is what ``orchestrator.compaction.tokens`` estimates for
the request (the estimate context accounting falls back on anyway), so a compaction or a
``step-count`` trigger fires where it would live; the ``model.call`` event is marked ``replay``
(purpose), so nobody is billed for it. Subagents (summaries, reflection) keep the real model.

Why a model wrapper rather than writing the messages into the store directly: a direct write would
have to repeat what a turn does (reminder delivery, step counting, the compaction check, the
post-turn sync) and would drift from it; this way replay cannot count differently from a live turn.
"""

from __future__ import annotations

from orchestrator.models.types import Message, ModelClient, ModelRequest, ModelResponse, TextSink

__all__ = ["REPLAY_MODEL", "RecordedReply"]

REPLAY_MODEL = "replay"
"""The model name a replayed call reports."""


class RecordedReply:
    """``ModelClient`` answering the first chat request with ``text`` (no provider call); every
    other request (a second step, or a subagent's purpose) goes to ``inner``."""

    def __init__(self, inner: ModelClient, text: str) -> None:
        self.inner = inner
        self.text = text
        self.used = False

    async def complete(self, request: ModelRequest, *, on_text: TextSink | None = None) -> ModelResponse:
        if self.used or request.purpose != "chat":
            return await self.inner.complete(request, on_text=on_text)
        self.used = True
        # lazy: the scripted model's patterns (~10 ms) load only once something is replayed
        from orchestrator.models.scripted import estimated_usage

        message = Message(role="assistant", content=self.text)
        if on_text is not None:
            await on_text(self.text)
        return ModelResponse(
            message=message,
            usage=estimated_usage(request, message),
            model=REPLAY_MODEL,
            replayed=True,
        )

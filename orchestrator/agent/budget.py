"""Budgets enforced before the spend (B1): a meter per scope and a model wrapper that asks it first.

Every request goes through :class:`BudgetedModel` on its way to the model. Before sending, the
request's prompt is estimated as compaction estimates it (``compaction/tokens.py``: system prompt,
messages and tool schemas at four characters a token) and its completion at its ``max_tokens``, or
at the room compaction keeps for an answer when it sets none; every meter of the chain (a turn's,
then its session's) must have that much left in tokens and cost, a call left, and time left. A
request that cannot fit is not sent: :class:`~orchestrator.base.limits.LimitReached` names the
limit. One that fits only with a shorter answer is sent with ``max_tokens`` lowered to what is
left, when that is still a useful answer (``MIN_COMPLETION``). After the response the provider's
usage is booked on every meter of the chain (the estimate when it reported none).

The estimate is below a provider's own count only by its tokenizer's disagreement with chars/4;
with the scripted model (which reports chars/4) and a completion within ``max_tokens``, a scope
never spends past its cap.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Iterator
from dataclasses import replace

from orchestrator.base.limits import LimitReached, Limits, Prices
from orchestrator.compaction.tokens import (
    estimate_messages,
    reserve,
    system_prompt_tokens,
    tool_schema_tokens,
)
from orchestrator.models.types import ModelClient, ModelRequest, ModelResponse, TextSink

__all__ = ["MIN_COMPLETION", "BudgetedModel", "Meter", "request_tokens"]

MIN_COMPLETION = 256
"""Fewer completion tokens than this left is no room for an answer: the request is not sent."""


def request_tokens(request: ModelRequest) -> int:
    """The prompt tokens of ``request`` as compaction estimates a context (COMPACTION-1.1)."""
    return (
        system_prompt_tokens(request.system) + estimate_messages(request.messages) + tool_schema_tokens(request.tools)
    )


class Meter:
    """What one scope has spent against its :class:`Limits`; ``parent`` is the enclosing scope's
    meter (a turn's session), charged with every booking too."""

    def __init__(
        self,
        limits: Limits,
        prices: Prices = Prices(),
        *,
        parent: Meter | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.limits = limits
        self.prices = prices
        self.parent = parent
        self.clock = clock
        self.started = clock()
        self.tokens = 0
        self.calls = 0
        self.cost = 0.0

    def chain(self) -> Iterator[Meter]:
        meter: Meter | None = self
        while meter is not None:
            yield meter
            meter = meter.parent

    def spent(self, measure: str) -> float:
        if measure == "seconds":
            return self.clock() - self.started
        value: float = getattr(self, measure)
        return value

    def admit(self, prompt_tokens: int, completion_cap: int) -> int:
        """The completion tokens a request of ``prompt_tokens`` may ask for (``completion_cap`` at
        most), or ``LimitReached`` naming the first limit of the chain it cannot fit."""
        allowed = completion_cap
        for meter in self.chain():
            allowed = min(allowed, meter._room(prompt_tokens, completion_cap))
        return allowed

    def _room(self, prompt_tokens: int, completion_cap: int) -> int:
        limits, scope = self.limits, self.limits.scope
        room = completion_cap
        if limits.seconds is not None and self.spent("seconds") >= limits.seconds:
            raise LimitReached(f"{scope}.seconds", limits.seconds, self.spent("seconds"))
        if limits.calls is not None and self.calls + 1 > limits.calls:
            raise LimitReached(f"{scope}.calls", limits.calls, self.calls, 1)
        if limits.tokens is not None:
            left = limits.tokens - self.tokens - prompt_tokens
            if left < min(MIN_COMPLETION, completion_cap):
                raise LimitReached(
                    f"{scope}.tokens", limits.tokens, self.tokens, prompt_tokens + min(MIN_COMPLETION, completion_cap)
                )
            room = min(room, left)
        if limits.cost is not None:
            needed = self.prices.cost(prompt_tokens, min(MIN_COMPLETION, completion_cap))
            left_cost = limits.cost - self.cost - self.prices.cost(prompt_tokens, 0)
            if self.cost + needed > limits.cost:
                raise LimitReached(f"{scope}.cost", limits.cost, self.cost, needed)
            if self.prices.completion > 0:
                room = min(room, math.floor(left_cost * 1e6 / self.prices.completion))
        return room

    def book(self, prompt_tokens: int, completion_tokens: int) -> None:
        """Charge one answered call to this meter and every enclosing one."""
        for meter in self.chain():
            meter.calls += 1
            meter.tokens += prompt_tokens + completion_tokens
            meter.cost += meter.prices.cost(prompt_tokens, completion_tokens)

    def report(self) -> dict[str, dict[str, float]]:
        """Each capped measure's ``{"cap", "spent"}`` by limit name (``session.cost``), for ``/cost``,
        the json result and the ``limit.reached`` event's readers."""
        out: dict[str, dict[str, float]] = {}
        for measure in ("tokens", "calls", "seconds", "cost"):
            cap = self.limits.cap(measure)
            if cap is not None:
                spent = self.spent(measure)
                out[f"{self.limits.scope}.{measure}"] = {"cap": cap, "spent": round(spent, 6)}
        return out


class BudgetedModel:
    """``ModelClient`` around ``inner`` that asks ``meter`` before each request and books after it.

    ``window``: the context window, whose answer room (``compaction.tokens.reserve``) is the
    completion a request without ``max_tokens`` is assumed to ask for. Attributes other than
    ``complete`` are the inner client's."""

    def __init__(self, inner: ModelClient, meter: Meter, *, window: int) -> None:
        self.inner = inner
        self.meter = meter
        self.window = window
        self.refused: LimitReached | None = None
        """The last limit a request was refused at, for a caller whose loop swallows the error (the
        summary ladder falls back to eviction, C3) and still reports the stop."""

    def __getattr__(self, name: str) -> object:
        return getattr(self.inner, name)

    async def complete(self, request: ModelRequest, *, on_text: TextSink | None = None) -> ModelResponse:
        prompt = request_tokens(request)
        cap = request.max_tokens or reserve(self.window)
        try:
            allowed = self.meter.admit(prompt, cap)
        except LimitReached as exc:
            self.refused = exc
            raise
        if allowed < cap:
            request = replace(request, max_tokens=allowed)
        response = await self.inner.complete(request, on_text=on_text)
        if not response.replayed:
            usage = response.usage
            if usage.prompt_tokens + usage.completion_tokens > 0:
                self.meter.book(usage.prompt_tokens, usage.completion_tokens)
            else:
                self.meter.book(prompt, estimate_messages((response.message,)))
        return response

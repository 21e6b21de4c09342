"""Budgets before the spend (B1): what a meter admits, what it books, and a refused request never sent."""

from __future__ import annotations

import pytest

from orchestrator.agent.budget import MIN_COMPLETION, BudgetedModel, Meter, request_tokens
from orchestrator.base.limits import LimitReached, Limits, Prices
from orchestrator.models.scripted import ScriptedModel
from orchestrator.models.types import Message, ModelRequest, ModelResponse


def _request(chars: int, max_tokens: int | None = None) -> ModelRequest:
    return ModelRequest(system="", messages=(Message("user", "x" * chars),), max_tokens=max_tokens)


def test_a_request_that_cannot_fit_names_the_first_limit_it_would_cross() -> None:
    session = Meter(Limits("session", tokens=10_000))
    turn = Meter(Limits("turn", tokens=50_000), parent=session)
    assert turn.admit(2_000, 4_000) == 4_000
    session.tokens = 9_000
    assert turn.admit(500, 4_000) == 500, "the answer is cut to what the session has left"
    with pytest.raises(LimitReached) as caught:
        turn.admit(800, 4_000)
    assert caught.value.limit == "session.tokens" and caught.value.needed == 800 + MIN_COMPLETION
    assert "raise [limits] session_tokens" in str(caught.value)


def test_cost_calls_and_time_are_limits_too() -> None:
    now = [0.0]
    meter = Meter(Limits("reflection", calls=2, seconds=30, cost=0.01), Prices(2.0, 8.0), clock=lambda: now[0])
    meter.book(1_000, 100)
    assert meter.cost == pytest.approx(0.0028) and meter.calls == 1
    assert meter.admit(1_000, 10_000) == 650, "(0.01 - 0.0028 - 0.002) USD buys 650 tokens at 8 USD per million"
    meter.book(1_000, 100)
    with pytest.raises(LimitReached, match="reflection calls limit"):
        meter.admit(10, 10)
    meter.calls = 0
    now[0] = 31.0
    with pytest.raises(LimitReached) as caught:
        meter.admit(10, 10)
    assert caught.value.limit == "reflection.seconds"


def test_booking_charges_every_enclosing_scope() -> None:
    session = Meter(Limits("session", cost=1.0), Prices(1.0, 1.0))
    task = Meter(Limits("turn"), Prices(1.0, 1.0), parent=session)
    task.book(300, 200)
    assert (task.tokens, session.tokens, session.calls) == (500, 500, 1)
    assert session.report() == {"session.cost": {"cap": 1.0, "spent": 0.0005}}


@pytest.mark.anyio
async def test_a_refused_request_is_not_sent_and_a_sent_one_is_booked_from_its_usage() -> None:
    asked: list[ModelRequest] = []

    async def answer(request: ModelRequest) -> ModelResponse:
        asked.append(request)
        return ModelResponse(Message("assistant", "fine"))

    meter = Meter(Limits("turn", tokens=1_000))
    model = BudgetedModel(ScriptedModel(script=[answer, answer]), meter, window=100_000)
    await model.complete(_request(2_000))
    assert asked[0].max_tokens == 1_000 - request_tokens(_request(2_000)), "the answer may use only what is left"
    assert meter.tokens > 500 and meter.calls == 1
    with pytest.raises(LimitReached):
        await model.complete(_request(2_000))
    assert len(asked) == 1 and model.refused is not None and model.refused.limit == "turn.tokens"

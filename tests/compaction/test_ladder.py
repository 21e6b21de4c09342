"""The summarizer ladder (C3, C6, S6): retries, fallback model, shrinking, emergency eviction,
the identifier re-prompt. Fake clients here are the ``ModelClient`` seam; the HTTP path is exercised
with the loopback server and ``OpenAIModel``; the scripted model end to end."""

from __future__ import annotations

from collections.abc import Callable, Iterator

import pytest

from orchestrator.compaction import (
    EMERGENCY_SUMMARY,
    EMPTY_SUMMARY,
    CompactionSettings,
    compact,
    summarize_with_fallback,
)
from orchestrator.compaction.planner import CompactionPlan, plan_compaction
from orchestrator.models.openai_client import OpenAIModel
from orchestrator.models.scripted import ScriptedModel
from orchestrator.models.types import Message, ModelError, ModelRequest, ModelResponse, TextSink
from orchestrator.testing.openai_server import LoopbackOpenAI, text_reply
from tests.compaction.builders import AS, A, T, U, alt, memory_update

Behaviour = Callable[[ModelRequest, int], str]


class FakeModel:
    """Answers with ``behaviour(request, call_number)``; raising inside it is a failed call."""

    def __init__(self, behaviour: Behaviour) -> None:
        self.behaviour = behaviour
        self.requests: list[ModelRequest] = []

    async def complete(self, request: ModelRequest, *, on_text: TextSink | None = None) -> ModelResponse:
        self.requests.append(request)
        return ModelResponse(message=Message("assistant", self.behaviour(request, len(self.requests))))


class Sleeps:
    def __init__(self) -> None:
        self.delays: list[float] = []

    async def __call__(self, seconds: float) -> None:
        self.delays.append(seconds)


def conversation() -> list[Message]:
    return [
        U("please fix the login bug in src/auth/login.py, see https://example.org/issues/42"),
        AS("Read", '{"path":"src/auth/login.py"}', call_id="r1"),
        T("def login(): ..." + "z" * 3000, call_id="r1"),
        A("Fixed it in commit 3f2a9c1d; tracked as AUTH-17 and #42."),
        U("thanks, now the docs"),
        A("Updating docs/guide.md next."),
        U("go on"),
        A("Done."),
    ]


SETTINGS = CompactionSettings(
    context_window=100_000, summarizer_model="primary", fallback_summarizer_model="backup"
)


def plan_for(messages: list[Message], settings: CompactionSettings = SETTINGS) -> CompactionPlan:
    """``all`` mode: everything before the newest user message is summarised."""
    return plan_compaction(messages, settings, system_prompt_tokens=0, tool_tokens=0, mode="all")


def full_summary(request: ModelRequest) -> str:
    return "I fixed src/auth/login.py (https://example.org/issues/42, #42, AUTH-17, commit 3f2a9c1d); next docs/guide.md."


@pytest.mark.anyio
async def test_429_then_success_honours_retry_after() -> None:
    def behaviour(request: ModelRequest, n: int) -> str:
        if n == 1:
            raise ModelError("429 rate limited", transient=True, status=429, retry_after=7)
        return full_summary(request)

    model, sleeps = FakeModel(behaviour), Sleeps()
    messages = conversation()
    outcome = await summarize_with_fallback(messages, plan_for(messages), SETTINGS, model, sleep=sleeps)
    assert outcome.status == "done" and outcome.model == "primary"
    assert sleeps.delays == [7.0]
    assert [a.result for a in outcome.attempts] == ["transient", "ok"]
    assert outcome.retention == 1.0 and not outcome.reprompted
    assert all(r.purpose == "summarize" and r.model == "primary" for r in model.requests)


@pytest.mark.anyio
async def test_always_500_moves_to_the_fallback_model() -> None:
    def behaviour(request: ModelRequest, n: int) -> str:
        if request.model == "primary":
            raise ModelError("500 internal", transient=True, status=500)
        return full_summary(request)

    model, sleeps = FakeModel(behaviour), Sleeps()
    messages = conversation()
    outcome = await summarize_with_fallback(messages, plan_for(messages), SETTINGS, model, sleep=sleeps)
    assert outcome.status == "done" and outcome.model == "backup"
    assert [r.model for r in model.requests] == ["primary"] * 3 + ["backup"]
    assert sleeps.delays == [1.0, 2.0]


@pytest.mark.anyio
async def test_non_transient_error_goes_to_fallback_at_once() -> None:
    def behaviour(request: ModelRequest, n: int) -> str:
        if request.model == "primary":
            raise ModelError("401 invalid api key", status=401)
        return full_summary(request)

    model = FakeModel(behaviour)
    messages = conversation()
    outcome = await summarize_with_fallback(messages, plan_for(messages), SETTINGS, model, sleep=Sleeps())
    assert [r.model for r in model.requests] == ["primary", "backup"]
    assert outcome.model == "backup"


@pytest.mark.anyio
async def test_both_fail_emergency_eviction() -> None:
    def behaviour(request: ModelRequest, n: int) -> str:
        raise ModelError("503 overloaded", transient=True, status=503)

    model = FakeModel(behaviour)
    messages = alt(10, 40)
    outcome = await summarize_with_fallback(messages, plan_for(messages), SETTINGS, model, sleep=Sleeps())
    assert outcome.status == "failed"
    assert outcome.summary == EMERGENCY_SUMMARY
    assert outcome.error == "503 overloaded"
    assert outcome.plan.cutoff == 5 and outcome.plan.evicted_count == 5
    assert outcome.message_text == (
        "Note: 5 messages from the beginning of the conversation have been hidden from view due to memory "
        "constraints.\nThe following is a summary of the previous messages:\n " + EMERGENCY_SUMMARY
    )
    assert outcome.new_context()[0].kind == "summary"
    assert outcome.new_context()[1:] == tuple(messages[5:])
    assert len(model.requests) == 6


@pytest.mark.anyio
async def test_emergency_without_cutoff_keeps_last_user_message_and_pending_call() -> None:
    model = FakeModel(lambda request, n: (_ for _ in ()).throw(ModelError("boom")))
    messages = [U("first"), U("second"), U("third"), AS()]
    settings = CompactionSettings(mode="all")
    outcome = await compact(messages, settings, model, system_prompt_tokens=0, tool_tokens=0, sleep=Sleeps())
    assert outcome.status == "failed"
    assert outcome.plan.kept == (2, 3)


@pytest.mark.anyio
async def test_context_overflow_shrinks_the_transcript() -> None:
    limit = 8000

    def behaviour(request: ModelRequest, n: int) -> str:
        if len(request.messages[0].content) > limit:
            raise ModelError("maximum context length exceeded", context_overflow=True, status=400)
        return "short summary"

    settings = CompactionSettings(context_window=100_000, summarizer_context_window=20_000)
    messages = [U("q" * 20_000), A("a" * 20_000), U("r" * 20_000), A("b"), U("next"), A("ok")]
    model = FakeModel(behaviour)
    outcome = await summarize_with_fallback(
        messages, plan_for(messages, settings), settings, model, sleep=Sleeps()
    )
    lengths = [len(r.messages[0].content) for r in model.requests]
    assert outcome.status == "done" and outcome.summary == "short summary"
    assert [a.result for a in outcome.attempts] == ["overflow"] * (len(lengths) - 1) + ["ok"]
    assert lengths == sorted(lengths, reverse=True) and lengths[-1] <= limit
    budgets = [a.budget_tokens for a in outcome.attempts]
    assert all(later <= earlier // 2 for earlier, later in zip(budgets, budgets[1:], strict=False))
    assert "[TRUNCATED: dropped" in model.requests[-1].messages[0].content


@pytest.mark.anyio
async def test_overflow_on_every_shrink_step_then_fallback_then_emergency() -> None:
    def behaviour(request: ModelRequest, n: int) -> str:
        raise ModelError("prompt is too long")

    model = FakeModel(behaviour)
    messages = alt(10, 400)
    outcome = await summarize_with_fallback(messages, plan_for(messages), SETTINGS, model, sleep=Sleeps())
    assert [r.model for r in model.requests] == ["primary"] * 4 + ["backup"] * 4
    assert outcome.status == "failed"


@pytest.mark.anyio
async def test_identifier_reprompt_once() -> None:
    def behaviour(request: ModelRequest, n: int) -> str:
        return "I fixed the login bug." if n == 1 else full_summary(request)

    model = FakeModel(behaviour)
    messages = conversation()
    outcome = await summarize_with_fallback(messages, plan_for(messages), SETTINGS, model, sleep=Sleeps())
    assert len(model.requests) == 2
    follow_up = model.requests[1].messages
    assert [m.role for m in follow_up] == ["user", "assistant", "user"]
    for identifier in ("src/auth/login.py", "https://example.org/issues/42", "#42", "AUTH-17", "3f2a9c1d"):
        assert f"- {identifier}" in follow_up[2].content
    assert outcome.reprompted and outcome.retention == 1.0 and outcome.missing_identifiers == ()
    assert outcome.stats.identifier_retention == 1.0


@pytest.mark.anyio
async def test_identifier_reprompt_happens_only_once() -> None:
    model = FakeModel(lambda request, n: "I fixed src/auth/login.py.")
    messages = conversation()
    outcome = await summarize_with_fallback(messages, plan_for(messages), SETTINGS, model, sleep=Sleeps())
    assert len(model.requests) == 2
    assert outcome.status == "done" and outcome.reprompted
    assert outcome.retention == pytest.approx(1 / 6)
    assert set(outcome.missing_identifiers) == {
        "https://example.org/issues/42",
        "#42",
        "AUTH-17",
        "3f2a9c1d",
        "docs/guide.md",
    }


@pytest.mark.anyio
async def test_pinned_previous_summary_and_memory_updates() -> None:
    previous = Message(
        "user",
        "Note: 4 messages from the beginning of the conversation have been hidden from view due to memory "
        "constraints.\nThe following is a summary of the previous messages:\n OLD SUMMARY",
        kind="summary",
    )
    messages = [
        previous,
        A("a1"),
        memory_update(),
        U("u2"),
        A("a3"),
        U("u4"),
        A("a5"),
        U("u6"),
        A("a7"),
        U("u8"),
    ]
    model = FakeModel(lambda request, n: "NEW SUMMARY")
    plan = plan_for(messages)
    outcome = await summarize_with_fallback(
        messages, plan, SETTINGS, model, sleep=Sleeps(), core_memory="CORE"
    )
    content = model.requests[0].messages[0].content
    assert content.startswith(
        "<previous_summary>\nOLD SUMMARY\n</previous_summary>\n\n<core_memory>\nCORE\n</core_memory>"
    )
    assert "hidden from view" not in content and "memory_update" not in content
    assert 0 in plan.pinned and 2 in plan.evicted and 2 not in plan.summarized
    assert outcome.plan.evicted_count == len(plan.evicted) - 1
    assert outcome.message_text.startswith("Note: prior messages have been hidden")
    assert all(m.kind != "memory_update" for m in outcome.new_context())


@pytest.mark.anyio
async def test_nothing_to_summarize_makes_no_call() -> None:
    model = FakeModel(lambda request, n: "unused")
    outcome = await compact(
        [U("only")], CompactionSettings(mode="all"), model, system_prompt_tokens=0, tool_tokens=0
    )
    assert outcome.summary == EMPTY_SUMMARY and model.requests == [] and outcome.status == "done"


@pytest.mark.anyio
async def test_custom_prompt_clip_and_strip() -> None:
    model = FakeModel(lambda request, n: "  abcdefghij  ")
    settings = CompactionSettings(prompt="CUSTOM", clip_chars=5)
    messages = alt(10)
    outcome = await compact(messages, settings, model, system_prompt_tokens=0, tool_tokens=0, model="conv")
    assert model.requests[0].system == "CUSTOM" and model.requests[0].model == "conv"
    assert outcome.summary == "abcde... [summary truncated to fit]"
    builtin = FakeModel(lambda request, n: "")
    outcome = await compact(messages, CompactionSettings(), builtin, system_prompt_tokens=0, tool_tokens=0)
    assert "Lookup hints" in builtin.requests[0].system and "300 words" in builtin.requests[0].system
    assert outcome.summary == ""


@pytest.mark.anyio
async def test_scripted_model_end_to_end() -> None:
    messages = conversation() * 3
    outcome = await compact(
        messages,
        CompactionSettings(),
        ScriptedModel(),
        system_prompt_tokens=100,
        tool_tokens=100,
        model="scripted",
    )
    assert outcome.status == "done"
    assert outcome.retention == 1.0
    assert "src/auth/login.py" in outcome.summary


@pytest.fixture
def loopback() -> Iterator[LoopbackOpenAI]:
    with LoopbackOpenAI() as server:
        yield server


@pytest.mark.anyio
async def test_reprompt_over_http_with_loopback_summarizer(loopback: LoopbackOpenAI) -> None:
    loopback.enqueue(text_reply("I fixed the login bug."), text_reply(full_summary(None)))  # type: ignore[arg-type]
    client = OpenAIModel(base_url=loopback.base_url, model="loopback-model", sleep=Sleeps())
    try:
        messages = conversation()
        outcome = await summarize_with_fallback(
            messages, plan_for(messages), SETTINGS, client, sleep=Sleeps(), max_attempts=1
        )
    finally:
        await client.aclose()
    bodies = loopback.chat_bodies
    assert len(bodies) == 2
    assert "AUTH-17" in bodies[1]["messages"][-1]["content"]
    assert outcome.reprompted and outcome.retention == 1.0

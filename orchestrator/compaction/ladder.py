"""Summarising a plan, and what happens when the summarizer fails (COMPACTION-3.4 to COMPACTION-3.6,
COMPACTION-5; C3, C5, C6, S6).

The ladder, in order:
1. the summarizer model (setting, default the conversation's model) with a token-aware shrinking
   transcript: the first budget is the summarizer window's trigger threshold minus the system prompt
   and pinned blocks; each context overflow halves ``min(budget, transcript size)`` and cuts the
   transcript's middle, up to 3 times (S6);
2. the fallback summarizer model, same schedule (skipped when unset or equal to the first);
3. emergency eviction (5.7): no model, p = 0.5, the fixed text; ``status`` is then ``"failed"``.
Every model call is retried with tenacity on transient errors (3 attempts, backoff 1 s, 2 s, ...,
``Retry-After`` honoured, capped at 60 s). A non-transient error that is not an overflow moves to the
next rung at once. Model failures never raise out of this module; cancellation does.

C6: identifiers (identifiers.py) said by the user or the assistant in the summarised messages, tool-call
arguments included, must appear in the summary. Tool results are left out of that check: they are bulk
evidence (a ``git log`` holds hundreds of hashes) that no 300-word summary can carry, and the re-prompt
would fire on every coding session. Missing ones trigger exactly one re-prompt naming them (at most 50
named); the better of the two summaries by retention is kept.

Why one module of ~470 lines: the rungs, their tenacity retries and the C6 re-prompt are one fallback
ladder; each rung's failure decides the next, so they stay together.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from functools import partial
from typing import TYPE_CHECKING, Literal

import anyio

from orchestrator.base import blocking
from orchestrator.compaction.identifiers import Retention, retention
from orchestrator.compaction.packaging import (
    EMERGENCY_SUMMARY,
    EMPTY_SUMMARY,
    SUMMARY_CLIP_SUFFIX,
    CompactionStats,
    clip_summary,
    raw_summary_from_text,
    summary_message,
    summary_message_text,
)
from orchestrator.compaction.planner import CompactionPlan, plan_compaction, plan_emergency
from orchestrator.compaction.settings import CompactionMode, CompactionSettings
from orchestrator.compaction.tokens import estimate_messages, estimate_text, threshold
from orchestrator.compaction.transcript import render_transcript, shrink_transcript, summarizer_input
from orchestrator.models.types import Message, ModelClient, ModelError, ModelRequest, is_context_overflow_text
from prompts import load_prompt

if TYPE_CHECKING:
    from tenacity import RetryCallState

__all__ = [
    "MAX_ATTEMPTS",
    "SHRINK_STEPS",
    "CompactionOutcome",
    "Sleep",
    "SummaryAttempt",
    "compact",
    "summarize_with_fallback",
    "summarizer_system_prompt",
]

Sleep = Callable[[float], Awaitable[None]]
MAX_ATTEMPTS = 3
SHRINK_STEPS = 3
_MAX_WAIT = 60.0
_MIN_BUDGET = 256
_MAX_NAMED = 50
_WORD_LIMITS = {"all": 500, "sliding_window": 300}


@dataclass(frozen=True)
class SummaryAttempt:
    """One model call (retries included as separate attempts)."""

    model: str
    rung: Literal["summarizer", "fallback", "reprompt"]
    budget_tokens: int
    transcript_chars: int
    result: Literal["ok", "overflow", "transient", "error"]
    error: str | None = None


@dataclass(frozen=True)
class CompactionOutcome:
    """What a compaction produced; the caller applies it (``new_context``) and stores the stats.

    ``status`` ``"failed"`` means every summarizer rung failed and ``plan`` is the emergency plan with
    the fixed summary: still applicable, the turn goes on (5.7). ``summary`` is the raw summary (for
    people, search and the next compaction's pinned block); ``message_text`` is what the model sees.
    """

    status: Literal["done", "failed"]
    summary: str
    message_text: str
    plan: CompactionPlan
    stats: CompactionStats
    model: str | None
    attempts: tuple[SummaryAttempt, ...]
    missing_identifiers: tuple[str, ...]
    reprompted: bool
    error: str | None = None

    @property
    def retention(self) -> float:
        return self.stats.identifier_retention

    def summary_message(self) -> Message:
        return summary_message(self.message_text)

    def new_context(self) -> tuple[Message, ...]:
        return (self.summary_message(), *self.plan.kept_messages)


class _Failed(Exception):
    """A rung gave up; carries the last error as one line."""


def _one_line(exc: BaseException) -> str:
    text = " ".join(str(exc).split()) or type(exc).__name__
    return text[:300]


def _is_overflow(exc: BaseException) -> bool:
    if isinstance(exc, ModelError) and exc.context_overflow:
        return True
    return is_context_overflow_text(str(exc))


def _is_transient(exc: BaseException) -> bool:
    return isinstance(exc, ModelError) and exc.transient and not _is_overflow(exc)


def _wait(state: RetryCallState) -> float:
    exc = state.outcome.exception() if state.outcome is not None else None
    if isinstance(exc, ModelError) and exc.retry_after is not None:
        return min(max(exc.retry_after, 0.0), _MAX_WAIT)
    return min(2.0 ** (state.attempt_number - 1), _MAX_WAIT)


def _result_kind(exc: BaseException) -> Literal["overflow", "transient", "error"]:
    if _is_overflow(exc):
        return "overflow"
    return "transient" if _is_transient(exc) else "error"


async def summarizer_system_prompt(settings: CompactionSettings, mode: CompactionMode) -> str:
    """The custom prompt when set (an empty one counts), else the mode's template with its word limit.

    A custom prompt written for sliding mode is not used when a sliding compaction escalated to ``all``.
    """
    if settings.prompt is not None and (mode == settings.mode):
        return settings.prompt
    template = await blocking.run_sync("files", partial(load_prompt, f"summarizer_{mode}"))
    return template.replace("{word_limit}", str(_WORD_LIMITS[mode]))


class _Caller:
    """Runs model calls with the retry policy and records every attempt."""

    def __init__(self, client: ModelClient, sleep: Sleep, max_attempts: int) -> None:
        self.client = client
        self.sleep = sleep
        self.max_attempts = max(1, max_attempts)
        self.attempts: list[SummaryAttempt] = []

    async def call(
        self,
        request: ModelRequest,
        *,
        rung: Literal["summarizer", "fallback", "reprompt"],
        budget: int,
        chars: int,
    ) -> str:
        async def once() -> str:
            try:
                response = await self.client.complete(request)
                if response.finish_reason == "error":
                    raise ModelError(response.message.content or "Local compaction failed")
            except Exception as exc:
                kind = _result_kind(exc)
                self.attempts.append(SummaryAttempt(request.model, rung, budget, chars, kind, _one_line(exc)))
                raise
            self.attempts.append(SummaryAttempt(request.model, rung, budget, chars, "ok"))
            return response.message.content.strip()

        # lazy: tenacity is needed once a summary is asked for, not at `reverie chat` start-up
        from tenacity import AsyncRetrying, retry_if_exception, stop_after_attempt

        retrying = AsyncRetrying(
            stop=stop_after_attempt(self.max_attempts),
            wait=_wait,
            retry=retry_if_exception(_is_transient),
            sleep=self.sleep,
            reraise=True,
        )
        result: str = await retrying(once)
        return result


def _identifier_source(messages: Sequence[Message]) -> str:
    parts: list[str] = []
    for m in messages:
        if m.kind not in ("message", "error") or m.role not in ("user", "assistant"):
            continue
        parts.append(m.content)
        parts.extend(call.arguments for call in m.tool_calls)
    return "\n".join(parts)


def _reprompt_text(missing: Sequence[str]) -> str:
    named = "\n".join(f"- {i}" for i in missing[:_MAX_NAMED])
    if len(missing) > _MAX_NAMED:
        named += f"\n- (and {len(missing) - _MAX_NAMED} more)"
    return load_prompt("summarizer_reprompt").replace("{missing}", named)


def _pinned_summary(
    messages: Sequence[Message], plan: CompactionPlan, previous_summary: str | None
) -> str | None:
    if not plan.pinned:
        return None
    if previous_summary:
        return previous_summary
    texts = [raw_summary_from_text(messages[i].content) or messages[i].content for i in plan.pinned]
    return "\n\n".join(t for t in texts if t) or None


def _outcome(
    messages: Sequence[Message],
    plan: CompactionPlan,
    settings: CompactionSettings,
    *,
    status: Literal["done", "failed"],
    summary: str,
    trigger: str,
    model: str | None,
    attempts: Sequence[SummaryAttempt],
    kept_retention: Retention | None,
    reprompted: bool,
    error: str | None,
) -> CompactionOutcome:
    stats = CompactionStats(
        trigger=trigger,
        context_tokens_before=estimate_messages(messages),
        context_tokens_after=estimate_text(summary) + estimate_messages(plan.kept_messages),
        context_window=settings.context_window,
        messages_count_before=len(messages),
        messages_count_after=1 + len(plan.kept_messages),
        identifier_retention=kept_retention.ratio if kept_retention is not None else 1.0,
    )
    return CompactionOutcome(
        status=status,
        summary=summary,
        message_text=summary_message_text(summary, mode=plan.mode, evicted_count=plan.evicted_count),
        plan=plan,
        stats=stats,
        model=model,
        attempts=tuple(attempts),
        missing_identifiers=kept_retention.missing if kept_retention is not None else (),
        reprompted=reprompted,
        error=error,
    )


async def summarize_with_fallback(
    messages: Sequence[Message],
    plan: CompactionPlan,
    settings: CompactionSettings,
    model_client: ModelClient,
    *,
    model: str = "",
    trigger: str = "context_window_limit",
    core_memory: str | None = None,
    previous_summary: str | None = None,
    system_prompt_tokens: int = 0,
    tool_tokens: int = 0,
    sleep: Sleep = anyio.sleep,
    max_attempts: int = MAX_ATTEMPTS,
) -> CompactionOutcome:
    """Summarise ``plan`` over ``messages`` through the ladder; never raises for model failures.

    ``model`` is the conversation's model (the summarizer default); ``previous_summary`` is the raw
    text of a summary being evicted (recovered from its message text when not given); ``sleep`` is the
    backoff wait, injectable so tests never sleep. ``max_attempts`` is per model call; pass 1 when the
    client already retries transient errors itself (``OpenAIModel`` does), so retries do not multiply.
    """
    summarized = [messages[i] for i in plan.summarized]
    pinned = _pinned_summary(messages, plan, previous_summary)
    common = {"trigger": trigger}
    if not any(_has_line(m) for m in summarized):
        summary = pinned if pinned is not None else EMPTY_SUMMARY
        return _outcome(
            messages,
            plan,
            settings,
            status="done",
            summary=summary,
            model=None,
            attempts=(),
            kept_retention=None,
            reprompted=False,
            error=None,
            **common,
        )
    system = await summarizer_system_prompt(settings, plan.mode)
    full = render_transcript(summarized)
    caller = _Caller(model_client, sleep, max_attempts)
    primary = settings.summarizer_for(model)
    rungs: list[tuple[str, Literal["summarizer", "fallback"]]] = [(primary, "summarizer")]
    if settings.fallback_summarizer_model and settings.fallback_summarizer_model != primary:
        rungs.append((settings.fallback_summarizer_model, "fallback"))
    window_limit = threshold(settings.summarizer_window) or settings.summarizer_window
    overhead = estimate_text(system) + estimate_text(
        summarizer_input("", previous_summary=pinned, core_memory=core_memory)
    )
    first_budget = max(_MIN_BUDGET, window_limit - overhead)
    last_error = "summarizer failed"
    for rung_model, rung in rungs:
        budget = first_budget
        for _ in range(SHRINK_STEPS + 1):
            transcript = shrink_transcript(full, budget)
            content = summarizer_input(transcript, previous_summary=pinned, core_memory=core_memory)
            request = ModelRequest(
                system=system,
                messages=(Message(role="user", content=content),),
                model=rung_model,
                purpose="summarize",
                max_tokens=plan.summary_tokens or None,
            )
            try:
                text = await caller.call(request, rung=rung, budget=budget, chars=len(transcript))
            except Exception as exc:
                last_error = _one_line(exc)
                if _is_overflow(exc):
                    budget = max(1, min(budget, estimate_text(transcript)) // 2)
                    continue
                break
            return await _checked(
                messages,
                plan,
                settings,
                caller,
                request,
                clip_summary(text, _clip_chars(settings, plan)),
                summarized=summarized,
                budget=budget,
                chars=len(transcript),
                **common,
            )
    emergency = plan_emergency(
        messages,
        settings,
        system_prompt_tokens=system_prompt_tokens,
        tool_tokens=tool_tokens,
        summary_tokens=estimate_text(EMERGENCY_SUMMARY),
    )
    return _outcome(
        messages,
        emergency,
        settings,
        status="failed",
        summary=EMERGENCY_SUMMARY,
        model=None,
        attempts=caller.attempts,
        kept_retention=None,
        reprompted=False,
        error=last_error,
        **common,
    )


def _clip_chars(settings: CompactionSettings, plan: CompactionPlan) -> int | None:
    """The summary's character cap: the setting, and in a small window the size the plan counted on
    (D4: a summary longer than planned would crowd out the newest message)."""
    if not plan.summary_tokens or plan.summary_tokens >= settings.summary_reserve:
        return settings.clip_chars
    wrapper = len(summary_message_text("", mode=plan.mode, evicted_count=plan.evicted_count))
    cap = max(1, plan.summary_tokens * 4 - wrapper - len(SUMMARY_CLIP_SUFFIX))
    return cap if settings.clip_chars is None else min(cap, settings.clip_chars)


def _has_line(message: Message) -> bool:
    return bool(message.content) or (message.role == "assistant" and bool(message.tool_calls))


async def _checked(
    messages: Sequence[Message],
    plan: CompactionPlan,
    settings: CompactionSettings,
    caller: _Caller,
    request: ModelRequest,
    summary: str,
    *,
    summarized: Sequence[Message],
    budget: int,
    chars: int,
    trigger: str,
) -> CompactionOutcome:
    """The C6 check and its single re-prompt; a failed re-prompt keeps the first summary."""
    source = _identifier_source(summarized)
    kept = retention(source, summary)
    reprompted = False
    if kept.missing:
        reprompted = True
        follow_up = await blocking.run_sync("files", partial(_reprompt_text, kept.missing))
        again = ModelRequest(
            system=request.system,
            messages=(
                *request.messages,
                Message(role="assistant", content=summary),
                Message(role="user", content=follow_up),
            ),
            model=request.model,
            purpose="summarize",
        )
        try:
            text = await caller.call(again, rung="reprompt", budget=budget, chars=chars)
        except Exception:
            text = None
        if text is not None:
            candidate = clip_summary(text, _clip_chars(settings, plan))
            second = retention(source, candidate)
            if second.ratio >= kept.ratio:
                summary, kept = candidate, second
    return _outcome(
        messages,
        plan,
        settings,
        status="done",
        summary=summary,
        trigger=trigger,
        model=request.model,
        attempts=caller.attempts,
        kept_retention=kept,
        reprompted=reprompted,
        error=None,
    )


async def compact(
    messages: Sequence[Message],
    settings: CompactionSettings,
    model_client: ModelClient,
    *,
    system_prompt_tokens: int,
    tool_tokens: int,
    core_memory: str | None = None,
    previous_summary: str | None = None,
    model: str = "",
    trigger: str = "context_window_limit",
    mode: CompactionMode | None = None,
    sleep: Sleep = anyio.sleep,
    max_attempts: int = MAX_ATTEMPTS,
) -> CompactionOutcome:
    """Plan and summarise one compaction of the in-context list ``messages``.

    ``mode`` overrides the settings' mode (a manual ``/compact all``). The caller applies the outcome
    (``outcome.new_context()``, ids through ``outcome.plan.kept``), persists it and emits the events.
    """
    plan = plan_compaction(
        messages, settings, system_prompt_tokens=system_prompt_tokens, tool_tokens=tool_tokens, mode=mode
    )
    return await summarize_with_fallback(
        messages,
        plan,
        settings,
        model_client,
        model=model,
        trigger=trigger,
        core_memory=core_memory,
        previous_summary=previous_summary,
        system_prompt_tokens=system_prompt_tokens,
        tool_tokens=tool_tokens,
        sleep=sleep,
        max_attempts=max_attempts,
    )

"""Planner properties on random well-formed conversations (summary reserve 1,000 as the summary size, S20)."""

from __future__ import annotations

import re

from hypothesis import given, settings
from hypothesis import strategies as st

from orchestrator.compaction import CompactionSettings, PlanningError, find_sliding_cutoff, plan_compaction
from orchestrator.compaction.planner import MIN_KEPT_CHARS, hard_limit, summary_allowance
from orchestrator.compaction.tokens import estimate_messages, threshold
from orchestrator.models.types import Message, MessageKind, ToolCall
from orchestrator.tools.truncation import clip_middle

_sizes = st.integers(min_value=0, max_value=6000)


@st.composite
def conversations(draw: st.DrawFn) -> list[Message]:
    messages: list[Message] = []
    if draw(st.booleans()):
        messages.append(Message("user", "Note: ...\n " + "s" * draw(_sizes), kind="summary"))
    call = 0
    for _ in range(draw(st.integers(min_value=0, max_value=12))):
        kind: MessageKind = draw(st.sampled_from(["message", "message", "reminder", "memory_update"]))
        messages.append(Message("user", "u" * draw(_sizes), kind=kind))
        for _ in range(draw(st.integers(min_value=0, max_value=4))):
            ncalls = draw(st.integers(min_value=0, max_value=2))
            calls = tuple(ToolCall(f"c{call + i}", "Bash", '{"command":"ls"}') for i in range(ncalls))
            messages.append(Message("assistant", "a" * draw(_sizes), tool_calls=calls))
            pending = ncalls and draw(st.integers(min_value=0, max_value=9)) == 0
            if pending:
                return messages
            for c in calls:
                messages.append(Message("tool", "t" * draw(_sizes), tool_call_id=c.id))
            call += ncalls
    return messages


def _calls_kept_with_results(messages: list[Message], kept: tuple[int, ...]) -> bool:
    kept_calls = {c.id for i in kept for c in messages[i].tool_calls}
    return all(messages[i].tool_call_id in kept_calls for i in kept if messages[i].role == "tool")


@settings(max_examples=200, deadline=None)
@given(
    conversations(),
    st.one_of(st.floats(min_value=-1, max_value=2), st.just(float("nan"))),
    st.one_of(st.none(), st.integers(1, 60000)),
)
def test_every_cutoff_is_valid(messages: list[Message], p: float, window: int | None) -> None:
    try:
        cut = find_sliding_cutoff(messages, p, window)
    except PlanningError:
        return
    pending = messages[-1].role == "assistant" and bool(messages[-1].tool_calls)
    assert messages[cut].role == "assistant"
    assert 0 < cut < len(messages) - (2 if pending else 1)
    assert _calls_kept_with_results(messages, tuple(range(cut, len(messages))))


@settings(max_examples=200, deadline=None)
@given(
    conversations(),
    st.sampled_from(["sliding_window", "all"]),
    st.integers(min_value=2000, max_value=40000),
    st.integers(min_value=0, max_value=500),
)
def test_plan_partitions_and_fits_whenever_possible(
    messages: list[Message], mode: str, window: int, fixed: int
) -> None:
    config = CompactionSettings(mode=mode, context_window=window, summary_reserve=1000)  # type: ignore[arg-type]
    plan = plan_compaction(messages, config, system_prompt_tokens=fixed, tool_tokens=fixed)
    n = len(messages)
    assert sorted(plan.evicted + plan.kept) == list(range(n))
    assert not set(plan.evicted) & set(plan.kept)
    assert list(plan.kept) == sorted(plan.kept)
    assert all(messages[i].kind != "memory_update" for i in plan.kept)
    assert set(plan.summarized) | set(plan.pinned) <= set(plan.evicted)
    assert all(messages[i].kind == "summary" for i in plan.pinned)
    assert plan.evicted_count == len(plan.evicted) - len(plan.pinned)
    assert _calls_kept_with_results(messages, plan.kept)
    allowance = summary_allowance(1000, window, 2 * fixed)
    reserve = plan.summary_tokens
    assert min(64, allowance) <= reserve <= allowance
    for i, message in zip(plan.kept, plan.kept_messages, strict=True):
        assert message == messages[i] or i in plan.cut_indices
        assert len(message.content) <= len(messages[i].content)

    limit = threshold(window)
    hard = hard_limit(window)
    assert limit is not None and hard is not None
    newest = next(
        (i for i in range(n - 1, -1, -1) if messages[i].role == "user" and messages[i].kind == "message"), None
    )
    if newest is None:
        return
    assert newest in plan.kept
    if plan.refused:
        assert plan.needed_tokens is not None and plan.needed_tokens > window
        return
    assert plan.tokens_after == 2 * fixed + reserve + estimate_messages(plan.kept_messages)
    step = next((i for i in range(n - 1, newest, -1) if messages[i].role == "assistant"), n)
    tight = [messages[newest], *(m for m in messages[step:] if m.kind != "memory_update")]
    if 2 * fixed + allowance + estimate_messages(tight) < limit:
        assert plan.fits and plan.tokens_after < limit and reserve == allowance
    if 2 * fixed + min(64, allowance) + estimate_messages(tight) <= hard:
        assert not plan.cut_indices
    assert plan.tokens_after <= hard


@settings(max_examples=300, deadline=None)
@given(st.text(max_size=3000), st.integers(min_value=0, max_value=4000))
def test_no_clip_is_longer_than_its_input(text: str, max_chars: int) -> None:
    for marker in (lambda o: f"[... {o:,} characters were cut ...]", lambda o: "[cut]"):
        clipped = clip_middle(text, max_chars, marker)
        assert len(clipped) <= len(text)
        assert clipped == text or len(clipped) < len(text)


@settings(max_examples=300, deadline=None)
@given(
    st.lists(st.integers(min_value=0, max_value=3000), min_size=0, max_size=8),
    st.integers(min_value=0, max_value=20000),
    st.integers(min_value=256, max_value=8000),
    st.integers(min_value=0, max_value=3000),
    st.sampled_from(["sliding_window", "all"]),
)
def test_newest_message_is_intact_or_the_turn_is_refused(
    history: list[int], newest_chars: int, window: int, fixed: int, mode: str
) -> None:
    messages: list[Message] = []
    for i, size in enumerate(history):
        messages.append(Message("user", "u" * size))
        messages.append(Message("assistant", f"answer {i} " + "a" * size))
    newest_text = "".join(chr(97 + i % 26) for i in range(newest_chars))
    messages.append(Message("user", newest_text))
    config = CompactionSettings(mode=mode, context_window=window)  # type: ignore[arg-type]
    plan = plan_compaction(messages, config, system_prompt_tokens=fixed, tool_tokens=0)
    hard = hard_limit(window)
    assert hard is not None
    kept_newest = plan.kept_messages[plan.kept.index(len(messages) - 1)].content
    alone = fixed + plan.summary_tokens + -(-newest_chars // 4)
    if plan.refused:
        assert alone > hard
        return
    assert plan.tokens_after <= hard
    if alone <= hard:
        assert kept_newest == newest_text
    else:
        assert len(kept_newest) < newest_chars
        assert "characters were cut from the middle of this message" in kept_newest
        marker = re.search(r"\n\[\.\.\. .*? \.\.\.\]\n", kept_newest)
        assert marker is not None
        kept_chars = len(kept_newest) - len(marker.group(0))
        assert newest_text.startswith(kept_newest[: marker.start()])
        assert newest_text.endswith(kept_newest[marker.end() :])
        assert kept_chars >= MIN_KEPT_CHARS

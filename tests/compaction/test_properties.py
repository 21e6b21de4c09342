"""Planner properties on random well-formed conversations (summary reserve 1,000 as the summary size, S20)."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from orchestrator.compaction import CompactionSettings, PlanningError, find_sliding_cutoff, plan_compaction
from orchestrator.compaction.planner import plan_all
from orchestrator.compaction.tokens import estimate_messages, threshold
from orchestrator.models.types import Message, MessageKind, ToolCall

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
    assert plan.tokens_after == 2 * fixed + 1000 + estimate_messages(plan.kept_messages)
    for i, message in zip(plan.kept, plan.kept_messages, strict=True):
        assert message == messages[i] or i == plan.cut_index

    limit = threshold(window)
    assert limit is not None

    def fits(kept: list[Message]) -> bool:
        return 2 * fixed + 1000 + estimate_messages(kept) < limit

    possible = False
    pending = n > 0 and messages[-1].role == "assistant" and bool(messages[-1].tool_calls)
    for cut in range(1, n - (2 if pending else 1)):
        if messages[cut].role == "assistant" and n >= 4:
            if fits([m for m in messages[cut:] if m.kind != "memory_update"]):
                possible = True
    possible = (
        possible
        or plan_all(
            messages, window=window, system_prompt_tokens=fixed, tool_tokens=fixed, summary_reserve=1000
        ).fits
    )
    if possible:
        assert plan.fits
        assert plan.tokens_after < limit

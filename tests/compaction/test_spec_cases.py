"""COMPACTION-9, re-expressed for reverie (the decisions in docs/design.md override it where they differ).

Cases in this module's scope that are not written, and why:
- S18 (out of scope: Anthropic model swaps, thinking blocks, images, oversized payload): S-1, S-2
  (Fable/Opus swap, reasoning options), F-6, F-7, F-13, E-1, E-6 (images), F-9 (thinking), O-2, O-3
  (oversized payload). F-1 and E-5 are kept in a text-only form (their image and thinking parts
  dropped).
- F-8: reverie messages carry one string, not text blocks, so there is nothing to join.
- S-6, S-7, S-8, S-11, F-14: letta-code's fixed character ladder, replaced by C3/S6; the reverie
  ladder is tested in test_ladder.py, the middle cut's marker below.
- E-3, E-4: staleness by timestamp; reverie messages carry no timestamps, so the caller passes the
  usage of the newest post-compaction response (C8), tested with ``context_size``.
- PL-23, PL-24: replaced by C5 (``all`` keeps the newest user message), tested below.
Owned elsewhere (turn loop, store, tools, reflection): PA-*, PB-1's stream, O-1, B-1..B-5's storage
side, Q-*, TR-*, R-*. B-5's clip itself and PB-1's plan are here.
"""

from __future__ import annotations

import math

import pytest

from orchestrator.compaction import (
    CompactionSettings,
    CompactionSettingsError,
    CompactionStats,
    ContextWindowTooSmall,
    PlanningError,
    clip_tool_result_on_load,
    context_size,
    estimate_message,
    estimate_messages,
    find_sliding_cutoff,
    plan_compaction,
    render_transcript,
    should_compact,
    shrink_transcript,
    soft_threshold,
    summarizer_input,
    summary_message_text,
    system_prompt_tokens,
    threshold,
    tool_schema_tokens,
)
from orchestrator.compaction.tokens import should_prepare
from orchestrator.models.types import Message, ToolCall, ToolSpec, Usage
from tests.compaction.builders import AS, A, T, U, alt

# 9.1 transcript formatting and packaging


def test_f1_text_only() -> None:
    messages = [
        U("Please inspect this screenshot."),
        AS("ShellCommand", '{"command":"ls","workdir":"/repo"}', text="The repo has source and docs."),
        T("README.md\nsrc"),
    ]
    assert render_transcript(messages) == (
        " \n[user] Please inspect this screenshot.\n"
        '[assistant] The repo has source and docs. -> ShellCommand({"command":"ls","workdir":"/repo"})\n'
        "[tool] README.md\nsrc\n \n. Generate the summary."
    )


def test_f2_tool_return_cut() -> None:
    messages = [AS("ShellCommand", '{"command":"cat huge.log"}'), T("x" * 12 + "END")]
    assert render_transcript(messages, tool_limit=10) == (
        ' \n[assistant] -> ShellCommand({"command":"cat huge.log"})\n'
        "[tool] xxxxxxxxxx... [truncated 5 chars]\n \n. Generate the summary."
    )


def test_f3_default_limit() -> None:
    out = render_transcript([T("x" * 2100 + "END")])
    assert "[truncated 103 chars]" in out
    assert "x" * 2100 not in out


def test_f4_f12_previous_summary_is_pinned_not_a_line() -> None:
    summary = Message(role="user", content="Note: ...\n raw recursive summary", kind="summary")
    assert render_transcript([summary]) == " \n\n \n. Generate the summary."
    text = summarizer_input(render_transcript([U("next")]), previous_summary="raw recursive summary")
    assert text.startswith("<previous_summary>\nraw recursive summary\n</previous_summary>")
    assert "[user] next" in text
    assert "prior messages have been hidden" not in text


def test_f5_empty_tool_result() -> None:
    assert render_transcript([T("")]) == " \n\n \n. Generate the summary."


def test_f10_f11_tool_call_arguments() -> None:
    message = Message(
        role="assistant",
        content="",
        tool_calls=(ToolCall("1", "Bash", "ls -la"), ToolCall("2", "Read", '{"path":"é/ü"}')),
    )
    assert (
        render_transcript([message])
        == ' \n[assistant] -> Bash(ls -la), Read({"path":"é/ü"})\n \n. Generate the summary.'
    )
    assert "-> X({})" in render_transcript([AS("X", "")])


def test_memory_update_is_not_rendered() -> None:
    update = Message(role="user", content="<memory_update>", kind="memory_update")
    assert render_transcript([update]) == " \n\n \n. Generate the summary."


def test_f14_middle_cut_uses_the_whole_budget() -> None:
    messages = [U("start"), AS("Shell", '{"command":"cat"}'), T("y" * 50000)] + [U("z" * 3000)] * 40
    full = render_transcript(messages)
    cut = shrink_transcript(full, 250)
    assert len(cut) <= 1000
    assert len(cut) > 900
    assert "\n[TRUNCATED: dropped " in cut and " middle chars due to context budget]\n" in cut
    assert cut.startswith(" \n[user] start")
    assert cut.endswith("\n \n. Generate the summary.")
    assert shrink_transcript(full, 10**6) == full


def test_p1_p3_model_visible_text() -> None:
    assert summary_message_text("summary body", mode="all", evicted_count=11) == (
        "Note: prior messages have been hidden from view due to conversation memory constraints.\n"
        "The following is a summary of the previous messages:\n summary body"
    )
    assert summary_message_text("S", mode="sliding_window", evicted_count=None) == (
        "Note: prior messages from the beginning of the conversation have been hidden from view due to "
        "conversation memory constraints.\nThe following is a summary of the previous messages:\n S"
    )


def test_p2_k_is_messages_actually_evicted() -> None:
    messages = alt(10)
    plan = plan_compaction(
        messages, CompactionSettings(sliding_percentage=0.7), system_prompt_tokens=0, tool_tokens=0
    )
    assert plan.cutoff == 7 and plan.evicted_count == 7
    assert summary_message_text("sliding body", mode=plan.mode, evicted_count=plan.evicted_count) == (
        "Note: 7 messages from the beginning of the conversation have been hidden from view due to memory "
        "constraints.\nThe following is a summary of the previous messages:\n sliding body"
    )


def test_p4_stats_key_order() -> None:
    stats = CompactionStats("manual", 10, 4, 1000, 12, 3, 0.5)
    assert stats.to_json() == (
        '{"trigger":"manual","context_tokens_before":10,"context_tokens_after":4,"context_window":1000,'
        '"messages_count_before":12,"messages_count_after":3,"identifier_retention":0.5}'
    )
    assert "context_window" not in CompactionStats("manual", 1, 1, None, 1, 1).as_dict()


# 9.3 estimation and threshold


def test_e2_usage_plus_trailing() -> None:
    messages = [U("look"), A("done"), U("keep going")]
    size = context_size(
        messages, system_prompt_tokens=50, tool_tokens=50, usage=Usage(400000, 7000), usage_index=1
    )
    assert (size.tokens, size.usage_tokens, size.trailing_tokens, size.source) == (407003, 407000, 3, "usage")


def test_e7_zero_usage_falls_back_to_estimate() -> None:
    messages = [U("x" * 40), A(""), U("y" * 9)]
    size = context_size(messages, system_prompt_tokens=5, tool_tokens=1, usage=Usage(0, 0), usage_index=1)
    assert (size.tokens, size.usage_tokens, size.source) == (5 + 10 + 0 + 3 + 1, 0, "estimate")


def test_e5_tool_call_estimate_text_only() -> None:
    assert estimate_message(AS("Read", '{"path":"x"}', text="hi")) == 5
    assert estimate_messages([U("x" * 5), U("x" * 5)]) == 4


def test_e8_e9_request_estimate() -> None:
    tools = [ToolSpec("t", "d", {})]
    size = context_size(
        [U("x" * 40)],
        system_prompt_tokens=system_prompt_tokens("S" * 40),
        tool_tokens=tool_schema_tokens(tools),
    )
    assert size.tokens == 32
    assert (
        context_size(
            [], system_prompt_tokens=system_prompt_tokens(""), tool_tokens=tool_schema_tokens([])
        ).tokens
        == 1
    )


@pytest.mark.parametrize(
    ("window", "expected"),
    [
        (100000, 83616),
        (200000, 183616),
        (81920, 65536),
        (10000, 8000),
        (1000, 800),
        (4, 3),
        (1, 0),
        (0, None),
        (-5, None),
        (math.nan, None),
        (math.inf, None),
    ],
)
def test_th_threshold(window: float, expected: int | None) -> None:
    assert threshold(window) == expected


def test_th1_strict_comparison() -> None:
    assert should_compact(86045, 100000)
    assert not should_compact(83616, 100000)
    assert not should_compact(None, 100000)


def test_soft_threshold_is_four_fifths_of_the_trigger() -> None:
    assert soft_threshold(100000) == math.floor(0.8 * 83616)
    assert soft_threshold(100000, 0.5) == 41808
    assert should_prepare(66893, 100000) and not should_prepare(66892, 100000)


# 9.4 planner (reverie values where the [REVERIE] note changes them)

PLANNER_CASES = [
    ("PL-2", alt(10), 0.3, None, 3),
    ("PL-3", alt(10), 0, None, 1),
    ("PL-4", alt(10), 2, None, 7),
    ("PL-5", alt(10), math.nan, None, 3),
    ("PL-6", alt(10), 0.8, None, 7),
    ("PL-7", alt(10), 0.9, None, 7),
    ("PL-8", alt(4), 0.3, None, 1),
    ("PL-11", [U(), A(), U(), AS()], 0.3, None, 1),
    ("PL-12", [U(), A(), U(), A(), U(), AS()], 0.3, None, 1),
    ("PL-14", alt(10, 400), 0.3, 1000, 5),
    ("PL-15", alt(10, 400), 0.3, 500, 7),
    ("PL-16", alt(5), 0.4, None, 1),
    ("PL-16 rounding", alt(5), 0.5, None, 3),
    ("PL-18", alt(20, 400), 0.3, 1000, 15),
    ("PL-19", alt(100, 400), 0.3, 500, 97),
    ("PL-20", alt(10, 400), 0.5, 1000, 7),
    ("PL-21", [U(), T(), T(), A(), U()], 0.3, None, 3),
]


@pytest.mark.parametrize(
    ("case", "messages", "p", "window", "cutoff"), PLANNER_CASES, ids=[c[0] for c in PLANNER_CASES]
)
def test_planner_cutoffs(
    case: str, messages: list[Message], p: float, window: int | None, cutoff: int
) -> None:
    assert find_sliding_cutoff(messages, p, window) == cutoff


def _pl22() -> list[Message]:
    messages = [U("x" * 40)]
    for i in range(6):
        messages += [AS("Bash", '{"command":"ls"}', call_id=f"c{i}"), T("t" * 4000, call_id=f"c{i}")]
    return [*messages, U("x" * 40)]


@pytest.mark.parametrize(("window", "cutoff"), [(3000, 9), (1500, 11)])
def test_pl22_tool_pairs(window: int, cutoff: int) -> None:
    assert find_sliding_cutoff(_pl22(), 0.3, window) == cutoff


ERROR_CASES = [
    ("PL-1", alt(3), None, "Not enough messages for sliding window compaction."),
    ("PL-9", [U()] * 6, None, "No assistant message found for sliding window compaction."),
    ("PL-10", [A(), U(), U(), U(), U()], None, "No assistant message found for sliding window compaction."),
    ("PL-13", alt(5), 0, "No assistant message found for sliding window compaction."),
    ("PL-17 400", alt(10, 400), 400, "No assistant message found for sliding window compaction."),
    ("PL-17 100", alt(10, 400), 100, "No assistant message found for sliding window compaction."),
]


@pytest.mark.parametrize(
    ("case", "messages", "window", "error"), ERROR_CASES, ids=[c[0] for c in ERROR_CASES]
)
def test_planner_errors(case: str, messages: list[Message], window: int | None, error: str) -> None:
    with pytest.raises(PlanningError) as info:
        find_sliding_cutoff(messages, 0.3, window)
    assert str(info.value) == error


def test_pl23_pl24_all_keeps_newest_user_message() -> None:
    settings = CompactionSettings(mode="all")
    plan = plan_compaction(
        [U("a"), AS(), T(), A("done"), U("new request"), AS()],
        settings,
        system_prompt_tokens=0,
        tool_tokens=0,
    )
    assert plan.mode == "all" and plan.kept == (4, 5) and plan.summarized == (0, 1, 2, 3)
    plan = plan_compaction([U(), A()], settings, system_prompt_tokens=0, tool_tokens=0)
    assert plan.kept == (0, 1) and plan.evicted == ()


def test_b7_sliding_result_over_threshold_escalates() -> None:
    settings = CompactionSettings(context_window=3000, summary_reserve=1000)
    messages = [U(), A(), U(), A(), U("q" * 6000)]
    plan = plan_compaction(messages, settings, system_prompt_tokens=0, tool_tokens=0)
    assert plan.mode == "all" and plan.escalated and plan.requested_mode == "sliding_window"
    # D4: over the threshold but within the window, the newest message stays whole
    assert plan.cut_index is None and plan.kept == (4,) and plan.kept_messages[0].content == "q" * 6000
    assert not plan.fits and plan.tokens_after <= 2850 and not plan.refused


def test_d4_message_that_alone_overflows_is_cut_keeping_what_fits() -> None:
    settings = CompactionSettings(context_window=3000, summary_reserve=1000)
    messages = [U(), A(), U("h" * 6000 + "t" * 6000)]
    plan = plan_compaction(messages, settings, system_prompt_tokens=500, tool_tokens=500)
    assert plan.cut_index == 2 and plan.tokens_after <= 2850
    text = plan.kept_messages[-1].content
    assert text.startswith("h") and text.endswith("t") and len(text) < 12000
    assert len(text) > (2850 - 1000 - plan.summary_tokens - 1) * 4 - 8


def test_d4_window_too_small_refuses_with_the_needed_size() -> None:
    settings = CompactionSettings(context_window=600)
    plan = plan_compaction([U("anything else")], settings, system_prompt_tokens=1200, tool_tokens=700)
    assert plan.refused and plan.needed_tokens is not None and plan.needed_tokens > 1900
    line = str(ContextWindowTooSmall(600, plan.needed_tokens))
    assert "600" in line and "--context-window" in line and "\n" not in line


def test_goal_met_but_threshold_not_keeps_searching() -> None:
    settings = CompactionSettings(context_window=10000, summary_reserve=2500)
    messages = alt(20, 1600)
    plan = plan_compaction(messages, settings, system_prompt_tokens=0, tool_tokens=0)
    assert plan.mode == "sliding_window" and plan.fits
    assert find_sliding_cutoff(messages, 0.3, 10000) == 5 and plan.cutoff == 7


def test_pb1_single_huge_user_message_is_cut_in_the_middle() -> None:
    settings = CompactionSettings(context_window=1000, summary_reserve=100)
    plan = plan_compaction([U("a" * 2000 + "b" * 2000)], settings, system_prompt_tokens=0, tool_tokens=0)
    assert plan.mode == "all" and plan.escalated and plan.cut_index == 0 and plan.tokens_after <= 950
    text = plan.kept_messages[0].content
    assert text.startswith("a") and text.endswith("b")
    assert "characters were cut from the middle of this message" in text and "conversation_search" in text


def test_b5_transcript_load_clip() -> None:
    text = "x" * 60000 + "TAIL"
    clipped = clip_tool_result_on_load(text)
    assert len(clipped) <= 40000
    assert "Tool result truncated during local transcript repair" in clipped
    assert clipped.endswith("TAIL")
    assert clip_tool_result_on_load("short") == "short"


def test_b6_invalid_mode() -> None:
    with pytest.raises(CompactionSettingsError) as info:
        CompactionSettings(mode="self_compact_all")  # type: ignore[arg-type]
    assert str(info.value) == (
        'Local backend compaction currently supports only modes "all" and "sliding_window" (received "self_compact_all").'
    )

"""The paired comparison of a sweep's settings: McNemar's exact test, the bootstrap interval of the
difference, the questions a ten-point difference needs, and the decision built on them."""

from __future__ import annotations

import math
from typing import Any

from hypothesis import given
from hypothesis import strategies as st

from orchestrator.batch.paired import compare_with_best, mcnemar_exact, question_scores, questions_needed
from orchestrator.batch.results import TaskResult
from orchestrator.batch.sweep import decide, summary_markdown


def test_mcnemar_exact_matches_the_binomial_tail() -> None:
    assert mcnemar_exact(0, 0) == 1.0
    assert math.isclose(mcnemar_exact(0, 5), 2 / 32)  # all five disagreements one way: 2 * (1/2)^5
    assert math.isclose(mcnemar_exact(1, 9), 2 * (1 + 10) / 1024)
    assert mcnemar_exact(5, 5) == 1.0


@given(st.integers(0, 60), st.integers(0, 60))
def test_mcnemar_is_a_symmetric_probability(b: int, c: int) -> None:
    p = mcnemar_exact(b, c)
    assert 0.0 < p <= 1.0 and p == mcnemar_exact(c, b)
    assert mcnemar_exact(b, c + 1) <= p or c + 1 <= b  # more one-sided evidence never raises p


def test_questions_needed_for_ten_points() -> None:
    assert questions_needed(0.0) == questions_needed(0.2)  # few disagreements seen: assume a fifth
    assert 150 <= questions_needed(0.2) <= 160
    assert questions_needed(0.4) > questions_needed(0.2)
    assert questions_needed(0.2, 0.2) < questions_needed(0.2, 0.1)


def _result(task: str, passed: bool) -> TaskResult:
    return TaskResult(id=task, status="passed" if passed else "failed", checks_passed=int(passed), checks_total=1)


def test_epochs_average_per_question() -> None:
    scores = question_scores([_result("a.epoch-1", True), _result("a.epoch-2", False), _result("b", True)])
    assert scores == {"a": 0.5, "b": 1.0}


def test_a_real_difference_is_detected_on_paired_questions_where_intervals_overlap() -> None:
    best = {f"q{i}": 1.0 if i < 40 else 0.0 for i in range(60)}
    worse = {**best, **{f"q{i}": 0.0 for i in range(8)}}  # 8 questions lost, none gained
    same = dict(best)
    rows = {c.setting: c for c in compare_with_best({"a": best, "b": worse, "c": same}, "a")}
    assert rows["b"].best_only == 8 and rows["b"].setting_only == 0 and rows["b"].detectable
    assert math.isclose(rows["b"].difference, -8 / 60) and rows["b"].high < 0 < 8 / 60
    assert not rows["c"].detectable and rows["c"].difference == 0.0
    again = {c.setting: c for c in compare_with_best({"a": best, "b": worse, "c": same}, "a")}
    assert again["b"] == rows["b"]  # the bootstrap is seeded: the same results, the same interval


def _row(setting: str, quality: float, tokens: int, reflections: int = 1, exercised: bool = True) -> dict[str, Any]:
    return {
        "setting": setting, "quality": {"mean": quality, "low": quality - 0.2, "high": quality + 0.2, "n": 60},
        "tokens": tokens, "cost": None, "reflections": reflections, "exercised": exercised,
    }


def test_the_decision_recommends_the_cheapest_not_detectably_worse_and_skips_the_unexercised() -> None:
    best = {f"q{i}": 1.0 if i < 40 else 0.0 for i in range(60)}
    slightly = {**best, "q0": 0.0}
    much = {**best, **{f"q{i}": 0.0 for i in range(10)}}
    rows = [
        _row("off", 39 / 60, 900, reflections=0),
        _row("step-count-2", 40 / 60, 2000),
        _row("step-count-5", 40 / 60, 100, reflections=0, exercised=False),
        _row("compaction-event", 30 / 60, 500),
    ]
    scores = {"off": slightly, "step-count-2": best, "step-count-5": best, "compaction-event": much}
    summary = decide(rows, pinned={}, override_pinned=False, epochs=1, scores=scores)
    assert summary["recommendation"]["setting"] == "off"
    assert "not detectably worse than the best, step-count-2" in summary["recommendation"]["reason"]
    assert summary["not_exercised"] == ["step-count-5"] and "step-count-5" not in summary["front"]
    paired = {c["setting"]: c for c in summary["paired"]}
    assert paired["compaction-event"]["detectable"] and not paired["off"]["detectable"]
    text = summary_markdown({**summary, "settings": [{**r, **_markdown_fields()} for r in rows]})
    assert "exact McNemar" in text and "Not exercised" in text and "| compaction-event | 60 | 10 | 0 |" in text


def test_nothing_detectable_says_how_many_questions_would_be() -> None:
    same = {f"q{i}": float(i % 2) for i in range(16)}
    rows = [_row("off", 0.5, 100, reflections=0), _row("step-count-2", 0.5, 200)]
    summary = decide(rows, pinned={}, override_pinned=False, epochs=1, scores={"off": same, "step-count-2": same})
    assert summary["detectable"].startswith("no detectable difference from the best, off, at n=16 questions; about ")
    assert "questions would detect a 10-point one" in summary["detectable"]


def _markdown_fields() -> dict[str, Any]:
    return {
        "outcomes": dict.fromkeys(("merged", "resolved", "no_changes", "pending", "kept", "failed"), 0),
        "samples": 60, "main_tokens_in": 0, "main_tokens_out": 0, "subagent_tokens_in": 0, "subagent_tokens_out": 0,
        "memory_bytes": None, "abilities": {},
    }

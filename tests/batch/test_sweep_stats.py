"""The sweep's decision: the interval, outcome accounting, the Pareto front and the recommendation."""

from __future__ import annotations

import math

from orchestrator.batch.results import OUTCOMES, TaskResult, reflection_outcomes, task_quality
from orchestrator.batch.suite import parse_task
from orchestrator.batch.sweep import epoch_tasks, split_pinned
from orchestrator.batch.sweep_stats import (
    base_task_id,
    limit_stops_cell,
    mean_interval,
    pareto_front,
    recommend,
    setting_stats,
)


def test_wilson_interval_for_pass_fail_scores() -> None:
    interval = mean_interval([1.0] * 3 + [0.0] * 13)
    assert interval is not None and interval.method == "wilson" and interval.n == 16
    assert math.isclose(interval.mean, 3 / 16)
    # Wilson's 95% interval for 3/16 (checked against statsmodels' proportion_confint: 0.0659, 0.4302)
    assert math.isclose(interval.low, 0.06589, abs_tol=1e-4) and math.isclose(interval.high, 0.43015, abs_tol=1e-4)
    everything = mean_interval([1.0] * 10)
    assert everything is not None and math.isclose(everything.high, 1.0) and everything.low < 0.8  # not zero-wide at 1
    assert mean_interval([]) is None


def test_normal_interval_for_graded_fractions_stays_in_range() -> None:
    interval = mean_interval([0.5, 0.25, 0.75, 1.0])
    assert interval is not None and interval.method == "normal"
    sd = math.sqrt(sum((x - 0.625) ** 2 for x in [0.5, 0.25, 0.75, 1.0]) / 3)
    assert math.isclose(interval.low, 0.625 - 1.959963984540054 * sd / 2)
    assert math.isclose(interval.high, 0.625 + 1.959963984540054 * sd / 2)
    high = mean_interval([1.0, 1.0, 0.5])
    assert high is not None and high.high == 1.0  # clipped


def test_more_samples_narrow_the_interval() -> None:
    few, many = mean_interval([1.0, 0.0] * 4), mean_interval([1.0, 0.0] * 40)
    assert few is not None and many is not None
    assert many.high - many.low < few.high - few.low


def test_reflection_outcomes_add_up_to_the_records() -> None:
    statuses = ["merged", "no_changes", "no_changes", "kept_conflict", "kept_invalid", "pending", "kept_recovered",
                "running", "failed", "discarded", "resolved", "something_new", "kept_review"]
    counts = reflection_outcomes(statuses)
    assert list(counts) == list(OUTCOMES)
    assert counts == {"merged": 1, "resolved": 1, "no_changes": 2, "pending": 3, "kept": 2, "review": 1, "failed": 3, "limit": 0}
    assert sum(counts.values()) == len(statuses)


def _result(task_id: str, quality: float, tokens: int, ability: str = "extraction", **extra: object) -> TaskResult:
    return TaskResult(
        id=task_id, status="passed" if quality else "failed", checks_passed=0, checks_total=0, tokens_in=tokens,
        quality=quality, grade={"ability": ability, "passed": bool(quality)}, **extra,  # type: ignore[arg-type]
    )


def test_setting_stats_split_tokens_and_sum_outcomes() -> None:
    results = [
        _result("a.epoch-1", 1.0, 100, subagent_tokens_in=40, reflections_launched=2,
                reflection_outcomes={"merged": 1, "no_changes": 1}),
        _result("a.epoch-2", 0.0, 120, ability="temporal", subagent_tokens_in=50, reflections_launched=1,
                reflection_outcomes={"failed": 1}),
    ]
    row = setting_stats("s", results, elapsed=1.5)
    assert row["tasks"] == 1 and row["epochs"] == 2 and row["samples"] == 2
    assert row["main_tokens_in"] == 130 and row["subagent_tokens_in"] == 90 and row["tokens"] == 220
    assert row["outcomes"]["merged"] == 1 and row["outcomes"]["no_changes"] == 1 and row["outcomes"]["failed"] == 1
    assert sum(row["outcomes"].values()) == row["reflections"] == 3
    assert row["abilities"] == {"extraction": {"mean": 1.0, "n": 1}, "temporal": {"mean": 0.0, "n": 1}}
    assert row["quality"]["mean"] == 0.5


def _row(label: str, mean: float, low: float, tokens: int) -> dict[str, object]:
    return {"setting": label, "quality": {"mean": mean, "low": low, "high": min(1.0, mean + 0.2)}, "tokens": tokens,
            "cost": None}


def test_pareto_front_and_the_cheapest_setting_within_the_best_interval() -> None:
    rows = [_row("off", 0.50, 0.30, 1000), _row("step-2", 0.60, 0.45, 3000), _row("step-5", 0.55, 0.35, 2000),
            _row("event", 0.40, 0.20, 2500)]
    assert pareto_front(rows) == ["off", "step-2", "step-5"]
    chosen = recommend(rows)
    assert chosen is not None and chosen.setting == "off"  # 0.50 >= 0.45, the best's lower bound
    assert "off" in chosen.reason and "step-2" in chosen.reason and "67% less tokens" in chosen.reason
    rows[0] = _row("off", 0.40, 0.20, 1000)
    chosen = recommend(rows)
    assert chosen is not None and chosen.setting == "step-5"


def test_task_quality_and_epochs_and_pinned() -> None:
    assert task_quality("passed", None) == 1.0 and task_quality("failed", {"passed": True}) == 1.0
    assert task_quality("error", {"passed": True}) == 0.0
    tasks = [parse_task({"id": "a", "turns": ["x"], "checks": [{"contains": "x"}]}),
             parse_task({"id": "b", "turns": ["x"], "checks": [{"contains": "x"}],
                         "settings": {"reflection_trigger": "step-count:2"}})]
    kept, pinned = split_pinned(tasks, override=False)
    assert [t.id for t in kept] == ["a"] and pinned == {"b": "step-count:2"}
    kept, pinned = split_pinned(tasks, override=True)
    assert [t.id for t in kept] == ["a", "b"] and pinned == {"b": "step-count:2"}
    assert [t.id for t in epoch_tasks(tasks, 2)] == ["a.epoch-1", "b.epoch-1", "a.epoch-2", "b.epoch-2"]
    assert epoch_tasks(tasks, 1) == tasks and base_task_id("b.epoch-2") == "b"


def test_costs_within_the_tolerance_tie_and_the_order_given_decides() -> None:
    rows = [_row("off", 0.19, 0.09, 757_951), _row("step-count-5", 0.19, 0.09, 746_965),
            _row("compaction-event", 0.19, 0.09, 3_078_976)]
    assert pareto_front(rows) == ["off", "step-count-5"]  # 1.5% apart: neither beats the other
    chosen = recommend(rows)
    assert chosen is not None and chosen.setting == "off"
    assert "step-count-5 cost the same within 5%" in chosen.reason and "at the lowest tokens" in chosen.reason
    assert recommend(list(reversed(rows))).setting == "step-count-5"  # type: ignore[union-attr]


def test_limit_stops_count_the_reflections_and_the_tasks_a_limit_stopped() -> None:
    results = [
        TaskResult(id="a", status="limit", checks_passed=0, checks_total=1, limit="task.tokens",
                   reflection_outcomes={"merged": 1, "limit": 2}),
        TaskResult(id="b", status="limit", checks_passed=0, checks_total=1, limit="run.cost"),
        TaskResult(id="c", status="passed", checks_passed=1, checks_total=1, reflection_outcomes={"limit": 1}),
    ]  # fmt: skip
    row = setting_stats("s", results)
    assert row["limit_stops"] == {"reflections": 3, "tasks": 2, "task_limits": {"run.cost": 1, "task.tokens": 1}}
    assert limit_stops_cell(row) == "3 refl, 2 tasks"
    assert limit_stops_cell(setting_stats("none", results[2:3])) == "1 refl"
    assert limit_stops_cell(setting_stats("none", [])) == "0"
    assert limit_stops_cell({"setting": "older summary"}) == "-"

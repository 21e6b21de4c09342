"""A sweep's budget (docs/design.md L3): rounds that cover the suite, the spend of every setting
together, and what a setting's run may spend under ``on_limit = stop``."""

from __future__ import annotations

from orchestrator.batch.sweep_budget import Spend, SweepBudget, round_ends, sweep_limit_line


def test_rounds_cover_every_task_once_in_slices_of_the_concurrency() -> None:
    assert round_ends(5, 2) == [2, 4, 5]
    assert round_ends(4, 4) == [4]
    assert round_ends(3, 0) == [1, 2, 3], "at least one task a round"
    assert round_ends(0, 3) == [0]


def test_the_budget_counts_every_setting_together_and_names_the_limit_reached() -> None:
    budget = SweepBudget({"tokens": 100, "cost": 1.0}, "finish", {"off": Spend(40, 0.1, 3.0)})
    assert budget.check() is None and budget.run_limits("on") == {}, "finish: a round runs whole"
    budget.record("on", Spend(60, 0.2, 4.0))
    assert budget.reached == "sweep.tokens" and budget.total("seconds") == 7.0
    summary = budget.summary({"off": 2, "on": 2}, 5)
    assert summary == {"limit": "sweep.tokens", "cap": 100.0, "spent": 100.0, "on_limit": "finish",
                       "ran": {"off": 2, "on": 2}, "of": 5}  # fmt: skip
    assert "off 2, on 2" in sweep_limit_line(summary) and "--resume with a raised limit" in sweep_limit_line(summary)


def test_under_stop_a_settings_run_may_spend_its_own_spend_plus_what_the_sweep_has_left() -> None:
    budget = SweepBudget({"tokens": 100, "seconds": 10.0}, "stop", {"off": Spend(30, 0.0, 2.0), "on": Spend(20, 0.0, 1.0)})
    assert budget.run_limits("on") == {"tokens": 70, "seconds": 8.0}
    assert budget.run_limits("new") == {"tokens": 50, "seconds": 7.0}
    budget.record("on", Spend(25, 0.0, 1.5), stopped="run.seconds")
    assert budget.reached == "sweep.seconds", "the run limit that stopped a setting is the sweep's"
    assert SweepBudget({}, "finish", {}).summary({}, 0) is None

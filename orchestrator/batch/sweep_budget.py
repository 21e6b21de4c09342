"""A sweep's limits (tokens, cost, wall time), spent by all its settings together (docs/design.md L3).

A sweep's decision pairs the settings task by task, so a sweep that stops must stop where every
setting has run the same tasks. ``run_sweep`` therefore runs a limited sweep in rounds: each round
every setting runs the next slice of the suite (as many tasks as run at once), and the budget is
checked between rounds, so ``on_limit = finish`` stops with equal counts. ``on_limit = stop`` also
stops the setting running when the budget is crossed (that setting's run gets what is left as its
own run limit) and launches no later setting of the round; the decision then compares the tasks
every setting ran. Spend is read back from each setting's own results and summary, so a resumed
sweep with a raised budget goes on from what was spent.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from orchestrator.batch.results import RESULTS_FILE, SUMMARY_FILE, TaskResult, read_results

__all__ = ["Spend", "SweepBudget", "read_spend", "round_ends", "sweep_limit_line"]

_MEASURES = ("tokens", "cost", "seconds")


@dataclass(frozen=True)
class Spend:
    """What one setting's run has spent: its results' tokens and cost, its real time (every
    invocation's, ``elapsed_total``)."""

    tokens: int = 0
    cost: float = 0.0
    seconds: float = 0.0

    @classmethod
    def of(cls, results: Sequence[TaskResult], seconds: float) -> Spend:
        return cls(sum(r.tokens_in + r.tokens_out for r in results), sum(r.cost or 0.0 for r in results), seconds)

    def get(self, measure: str) -> float:
        return float(getattr(self, measure))


def read_spend(run_dir: Path) -> Spend:
    """A setting's spend as its run directory records it (nothing yet: zero). Blocking."""
    results = list(read_results(run_dir / RESULTS_FILE).values())
    try:
        summary = json.loads((run_dir / SUMMARY_FILE).read_text(encoding="utf-8"))
        seconds = float(summary.get("elapsed_total", summary.get("elapsed")) or 0.0)
    except (OSError, ValueError, TypeError, AttributeError):
        seconds = 0.0
    return Spend.of(results, seconds)


def round_ends(count: int, size: int) -> list[int]:
    """Pure: where each round's prefix of ``count`` tasks ends, ``size`` tasks a round."""
    step = max(1, size)
    return [min(end, count) for end in range(step, count + step, step)] or [0]


class SweepBudget:
    """The sweep's limits against what its settings spent together (settings run one after another,
    so their real times add up to the sweep's)."""

    def __init__(self, limits: Mapping[str, float], on_limit: str, spent: Mapping[str, Spend]) -> None:
        self.limits = {m: float(v) for m, v in limits.items() if m in _MEASURES}
        self.on_limit = on_limit
        self.spent = dict(spent)
        self.reached: str | None = None

    @property
    def limited(self) -> bool:
        return bool(self.limits)

    def total(self, measure: str) -> float:
        return sum(s.get(measure) for s in self.spent.values())

    def record(self, label: str, spend: Spend, stopped: str | None = None) -> None:
        """A setting's run ended having spent ``spend`` (``stopped``: the run limit that stopped it)."""
        self.spent[label] = spend
        if stopped is not None and self.reached is None:
            self.reached = "sweep." + stopped.partition(".")[2]
        self.check()

    def check(self) -> str | None:
        """The limit reached (``sweep.tokens``), if any."""
        for measure in _MEASURES:
            cap = self.limits.get(measure)
            if self.reached is None and cap is not None and self.total(measure) >= cap:
                self.reached = f"sweep.{measure}"
        return self.reached

    def run_limits(self, label: str) -> dict[str, float]:
        """The limits of a setting's run in this round: none with ``finish`` (the round ends whole);
        with ``stop``, the setting's own spend plus what the sweep has left, so the run stops where
        the sweep's budget runs out."""
        if self.on_limit != "stop":
            return {}
        own = self.spent.get(label, Spend())
        limits: dict[str, float] = {}
        for m, cap in self.limits.items():
            left = own.get(m) + cap - self.total(m)
            limits[m] = int(left) if m == "tokens" else left
        return limits

    def summary(self, ran: Mapping[str, int], of: int) -> dict[str, Any] | None:
        """The sweep summary's ``sweep_limit``: the limit, its cap, the spend, how many of the ``of``
        task runs each setting made; None when no limit was reached."""
        if self.reached is None:
            return None
        measure = self.reached.partition(".")[2]
        return {
            "limit": self.reached,
            "cap": self.limits[measure],
            "spent": round(self.total(measure), 6),
            "on_limit": self.on_limit,
            "ran": dict(ran),
            "of": of,
        }


def sweep_limit_line(stopped: Mapping[str, Any]) -> str:
    """Pure: the summary's line for a sweep that stopped at one of its limits (docs/design.md L3):
    which, what was spent, how many task runs each setting made, and how to go on."""
    measure = str(stopped["limit"]).partition(".")[2]
    unit = {"tokens": " tokens", "cost": " USD", "seconds": " s"}.get(measure, "")
    ran = ", ".join(f"{label} {n}" for label, n in stopped["ran"].items())
    return (
        f"Stopped at the sweep's {measure} limit ({stopped['limit']}): spent {stopped['spent']:g}{unit} of "
        f"{stopped['cap']:g}{unit} (on limit: {stopped['on_limit']}); task runs per setting, of {stopped['of']}: {ran}; "
        "the decision compares the tasks every setting ran; --resume with a raised limit runs the rest"
    )

"""What a sweep decides: per-setting quality with its interval, cost split main/subagents, every
reflection outcome, the quality-cost Pareto front and one recommended setting (pure functions).

Each of these is a choice the specs leave open: quality is the mean task score with a Wilson or
normal interval, cost is priced or in tokens, costs within ``COST_TOLERANCE`` count as equal, a
trigger that never fired is not ``exercised`` and stays off the front, and the recommendation is
the cheapest setting not detectably worse than the best. Each choice and its reason is written down
in docs/architecture.md, "What a sweep decides"."""

from __future__ import annotations

import math
import re
from collections import defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from orchestrator.batch.results import OUTCOMES, TaskResult

__all__ = [
    "COST_TOLERANCE",
    "EPOCH_SUFFIX",
    "Interval",
    "Recommendation",
    "base_task_id",
    "exercised",
    "limit_stops",
    "limit_stops_cell",
    "mean_interval",
    "pareto_front",
    "recommend",
    "setting_stats",
]

EPOCH_SUFFIX = re.compile(r"\.epoch-(\d+)$")
"""A task repeated by ``--epochs N`` runs as ``<id>.epoch-<k>`` (k = 1..N)."""
_Z = 1.959963984540054
COST_TOLERANCE = 0.05


def base_task_id(task_id: str) -> str:
    """The suite's task id of an epoch's copy (``a.epoch-2`` -> ``a``)."""
    return EPOCH_SUFFIX.sub("", task_id)


@dataclass(frozen=True)
class Interval:
    """A mean and its 95% interval over ``n`` samples (``method``: ``wilson`` or ``normal``)."""

    mean: float
    low: float
    high: float
    n: int
    method: str

    def to_json(self) -> dict[str, Any]:
        return {"mean": round(self.mean, 4), "low": round(self.low, 4), "high": round(self.high, 4), "n": self.n,
                "method": self.method}


def mean_interval(scores: Sequence[float]) -> Interval | None:
    """The mean of ``scores`` and its 95% interval (module docstring), None without scores."""
    n = len(scores)
    if n == 0:
        return None
    mean = sum(scores) / n
    if all(s in (0.0, 1.0) for s in scores):
        centre = (mean + _Z**2 / (2 * n)) / (1 + _Z**2 / n)
        half = _Z * math.sqrt(mean * (1 - mean) / n + _Z**2 / (4 * n * n)) / (1 + _Z**2 / n)
        return Interval(mean, max(0.0, centre - half), min(1.0, centre + half), n, "wilson")
    sd = math.sqrt(sum((s - mean) ** 2 for s in scores) / (n - 1)) if n > 1 else 0.0
    half = _Z * sd / math.sqrt(n)
    return Interval(mean, max(0.0, mean - half), min(1.0, mean + half), n, "normal")


def setting_stats(label: str, results: Sequence[TaskResult], *, elapsed: float | None = None) -> dict[str, Any]:
    """Pure: one setting's row of the decision (quality, abilities, cost, outcomes, memory, time)."""
    scores = [r.quality if r.quality is not None else (1.0 if r.status == "passed" else 0.0) for r in results]
    quality = mean_interval(scores)
    by_ability: dict[str, list[float]] = defaultdict(list)
    for result, score in zip(results, scores, strict=True):
        ability = (result.grade or {}).get("ability")
        if ability:
            by_ability[str(ability)].append(score)
    outcomes = dict.fromkeys(OUTCOMES, 0)
    for result in results:
        for name, count in result.reflection_outcomes.items():
            outcomes[name] = outcomes.get(name, 0) + int(count)
    main_in = sum(r.tokens_in - r.subagent_tokens_in for r in results)
    main_out = sum(r.tokens_out - r.subagent_tokens_out for r in results)
    sub_in = sum(r.subagent_tokens_in for r in results)
    sub_out = sum(r.subagent_tokens_out for r in results)
    priced = [r for r in results if r.cost is not None]
    cost = round(sum(r.cost or 0.0 for r in priced), 6) if priced else None
    sub_cost = round(sum(r.subagent_cost or 0.0 for r in priced), 6) if priced else None
    sizes = [r.memory_bytes for r in results if r.memory_bytes is not None]
    epochs = {EPOCH_SUFFIX.search(r.id).group(1) for r in results if EPOCH_SUFFIX.search(r.id)}  # type: ignore[union-attr]
    return {
        "setting": label,
        "tasks": len({base_task_id(r.id) for r in results}),
        "epochs": max(1, len(epochs)),
        "samples": len(results),
        "passed": sum(r.status == "passed" for r in results),
        "errors": sum(r.status == "error" for r in results),
        "quality": None if quality is None else quality.to_json(),
        "abilities": {
            name: {"mean": round(sum(v) / len(v), 4), "n": len(v)} for name, v in sorted(by_ability.items())
        },
        "tokens": main_in + main_out + sub_in + sub_out,
        "main_tokens_in": main_in,
        "main_tokens_out": main_out,
        "subagent_tokens_in": sub_in,
        "subagent_tokens_out": sub_out,
        "replayed_tokens": sum(r.replayed_tokens for r in results),
        "cost": cost,
        "main_cost": None if cost is None or sub_cost is None else round(cost - sub_cost, 6),
        "subagent_cost": sub_cost,
        "reflections": sum(r.reflections_launched for r in results),
        "outcomes": outcomes,
        "limit_stops": limit_stops(results),
        "compactions": sum(r.compactions for r in results),
        "memory_bytes": round(sum(sizes) / len(sizes)) if sizes else None,
        "elapsed": elapsed,
        "wall_time": round(sum(r.wall_time for r in results), 3),
    }


def limit_stops(results: Sequence[TaskResult]) -> dict[str, Any]:
    """Pure: how often a limit stopped this setting's work (B1, L1), from the store's records: its
    reflections whose outcome is ``limit`` and its tasks whose status is ``limit``, each task's
    limit named (``task.tokens``: how many tasks it stopped)."""
    by_limit: dict[str, int] = defaultdict(int)
    for result in results:
        if result.status == "limit":
            by_limit[result.limit or "unnamed"] += 1
    return {
        "reflections": sum(int(r.reflection_outcomes.get("limit", 0)) for r in results),
        "tasks": sum(by_limit.values()),
        "task_limits": dict(sorted(by_limit.items())),
    }


def limit_stops_cell(row: Mapping[str, Any]) -> str:
    """A setting's limit stops in a few characters (``2 refl, 1 task``; ``0`` for none; ``-`` for a
    summary written before sweeps counted them), for the sweep's table, Markdown and report."""
    stops = row.get("limit_stops")
    if stops is None:
        return "-"
    parts = [f"{stops['reflections']} refl" if stops["reflections"] else "",
             f"{stops['tasks']} task{'s' if stops['tasks'] != 1 else ''}" if stops["tasks"] else ""]
    return ", ".join(p for p in parts if p) or "0"


def _cost(row: Mapping[str, Any]) -> float:
    return float(row["cost"]) if row.get("cost") is not None else float(row["tokens"])


def _quality(row: Mapping[str, Any]) -> float:
    return float(row["quality"]["mean"]) if row.get("quality") else 0.0


def _clearly_cheaper(a: float, b: float) -> bool:
    return a < b * (1 - COST_TOLERANCE)


def _about_as_cheap(a: float, b: float) -> bool:
    return a <= b * (1 + COST_TOLERANCE)


def _beats(o: Mapping[str, Any], r: Mapping[str, Any]) -> bool:
    qo, qr, co, cr = _quality(o), _quality(r), _cost(o), _cost(r)
    return (qo >= qr and _clearly_cheaper(co, cr)) or (qo > qr and _about_as_cheap(co, cr))


def exercised(row: Mapping[str, Any]) -> bool:
    """Whether the setting's trigger was put to the test (module docstring)."""
    return bool(row.get("exercised", True))


def pareto_front(rows: Sequence[Mapping[str, Any]]) -> list[str]:
    """The labels of the settings on the quality-cost front, in the rows' order (module docstring)."""
    measured = [r for r in rows if exercised(r)]
    return [str(r["setting"]) for r in measured if not any(_beats(o, r) for o in measured if o is not r)]


@dataclass(frozen=True)
class Recommendation:
    """The recommended setting and the sentence (with its numbers) that says why."""

    setting: str
    reason: str

    def to_json(self) -> dict[str, str]:
        return {"setting": self.setting, "reason": self.reason}


def _describe(row: Mapping[str, Any]) -> str:
    q = row["quality"] or {"mean": 0.0, "low": 0.0, "high": 0.0}
    spent = f"${row['cost']:.4f}" if row.get("cost") is not None else f"{row['tokens']:,} tokens"
    return f"{row['setting']} (quality {q['mean']:.3f} [{q['low']:.3f}, {q['high']:.3f}], {spent})"


def recommend(rows: Sequence[Mapping[str, Any]], not_worse: Sequence[str] | None = None) -> Recommendation | None:
    """The module docstring's rule; None without an exercised row. ``not_worse``: the labels the
    paired test cannot tell from the best (the best among them)."""
    rows = [r for r in rows if exercised(r)]
    if not rows:
        return None
    best = max(rows, key=_quality)
    if not_worse is not None:
        close = [r for r in rows if r["setting"] in not_worse or r is best]
    else:
        floor = float(best["quality"]["low"]) if best.get("quality") else 0.0
        close = [r for r in rows if _quality(r) >= floor]
    cheapest = min(_cost(r) for r in close)
    tied = [r for r in close if _about_as_cheap(_cost(r), cheapest)]
    chosen = min(tied, key=lambda r: (-_quality(r), rows.index(r)))
    unit = "cost" if chosen.get("cost") is not None else "tokens"
    others = [r for r in tied if r is not chosen]
    tie = f"; {', '.join(str(r['setting']) for r in others)} cost the same within {COST_TOLERANCE:.0%}" if others else ""
    if _quality(chosen) == _quality(best):
        reason = f"{_describe(chosen)}: the best quality"
        cheaper = [r for r in rows if _clearly_cheaper(_cost(r), _cost(chosen))]
        if cheaper:
            reason += f"; every cheaper setting scores below its interval ({', '.join(_describe(r) for r in cheaper)})"
        else:
            reason += f" at the lowest {unit}"
    else:
        saved = 1 - _cost(chosen) / _cost(best) if _cost(best) else 0.0
        within = "not detectably worse than" if not_worse is not None else "quality within the interval of"
        reason = f"{_describe(chosen)}: {within} the best, {_describe(best)}, for {saved:.0%} less {unit}"
    return Recommendation(str(chosen["setting"]), reason + tie)

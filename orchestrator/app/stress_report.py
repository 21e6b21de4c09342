"""What a ``reverie stress`` run is asked to do and what it measured (S21, O7).

``StressConfig`` is checked once, where it is built, so the command line and the library refuse a
bad shape with the same one-line error; ``StressReport`` carries the accounting equation and the
verdict the command prints, so a report read back from JSON (``to_json``) and the table agree.
The run itself is :mod:`orchestrator.app.stress`.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any, Final

from orchestrator.app.stress_faults import parse_faults
from orchestrator.base.config import MERGE_POLICIES
from orchestrator.base.errors import UsageError

__all__ = ["VERDICT_OK", "StressConfig", "StressReport", "percentile"]

VERDICT_OK: Final = "OK: nothing lost, memory valid"


@dataclass(frozen=True)
class StressConfig:
    """The shape of a stress run: writers, commits each, conflicts, policy, limits and faults."""

    writers: int
    commits: int
    conflict_rate: float = 0.1
    seed: int = 0
    main_interval: float = 0.25
    merge_policy: str = "resolve"
    limit_pressure: bool = False
    faults: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        if self.merge_policy not in MERGE_POLICIES.names:
            raise UsageError(f"merge_policy {self.merge_policy!r}: use {MERGE_POLICIES.allowed()}")
        if self.writers < 1:
            raise UsageError(f"--writers must be at least 1, got {self.writers}")
        if self.commits < 1:
            raise UsageError(f"--commits must be at least 1, got {self.commits}")
        if not 0.0 <= self.conflict_rate <= 1.0:
            raise UsageError(f"--conflict-rate must be between 0 and 1, got {self.conflict_rate}")
        parse_faults(",".join(self.faults))


@dataclass(frozen=True)
class StressReport:
    """What a stress run measured, the accounting equation and the verdict (see the module doc)."""

    merged: int
    kept: int
    lost: int
    invalid: int
    merge_p50_ms: float
    merge_p99_ms: float
    recorded: int = 0
    main_commits: int = 0
    merges: int = 0
    elapsed_s: float = 0.0
    resolved: int = 0
    pending: int = 0
    retried: int = 0
    kept_branches: tuple[str, ...] = ()
    interrupted: bool = False
    unmerged_branches: tuple[tuple[str, int], ...] = ()
    invalid_combined: int = 0
    writer_commits: tuple[str, ...] = ()
    lost_commits: tuple[str, ...] = ()
    faults_injected: tuple[tuple[str, int], ...] = ()
    faults_recovered: tuple[tuple[str, int], ...] = ()
    faults_unrecovered: tuple[str, ...] = ()
    faults_interrupted: int = 0
    faults_skipped: tuple[tuple[str, str], ...] = ()
    merge_policy: str = "resolve"
    workdir: str | None = None

    @property
    def unmerged(self) -> int:
        return sum(count for _, count in self.unmerged_branches)

    @property
    def accounted(self) -> int:
        """The right-hand side of the equation."""
        return self.merged + self.resolved + self.kept + self.pending + self.unmerged + self.main_commits

    @property
    def equation(self) -> str:
        sign = "=" if self.accounted == self.recorded else "!="
        return (
            f"recorded {self.recorded} {sign} merged {self.merged} + resolved {self.resolved} + kept {self.kept}"
            f" + pending {self.pending} + unmerged {self.unmerged} + main {self.main_commits}"
        )

    @property
    def verdict(self) -> str:
        """``OK: nothing lost, memory valid`` or each thing that is wrong."""
        wrong = []
        if self.lost:
            wrong.append(f"{self.lost} commit(s) lost")
        if self.invalid:
            wrong.append(f"{self.invalid} HEAD(s) fail validation")
        if self.accounted != self.recorded:
            wrong.append(f"accounting does not add up ({self.equation})")
        if self.faults_unrecovered:
            wrong.append(f"{len(self.faults_unrecovered)} fault(s) not recovered ({self.faults_unrecovered[0]})")
        if self.faults_interrupted and not self.interrupted:
            wrong.append(f"{self.faults_interrupted} fault(s) never settled")
        return VERDICT_OK if not wrong else "FAIL: " + "; ".join(wrong)

    @property
    def ok(self) -> bool:
        return self.verdict == VERDICT_OK

    def to_json(self) -> dict[str, Any]:
        """Every figure the table shows, in one naming style, plus the lists behind them."""
        injected, recovered = dict(self.faults_injected), dict(self.faults_recovered)
        return {
            "recorded": self.recorded,
            "merged": self.merged,
            "resolved": self.resolved,
            "kept": self.kept,
            "pending": self.pending,
            "unmerged": self.unmerged,
            "main": self.main_commits,
            "accounted": self.accounted == self.recorded,
            "lost": self.lost,
            "invalid": self.invalid,
            "invalid_combined": self.invalid_combined,
            "retried": self.retried,
            "merge_calls": self.merges,
            "merge_p50_ms": self.merge_p50_ms,
            "merge_p99_ms": self.merge_p99_ms,
            "elapsed_s": self.elapsed_s,
            "merge_policy": self.merge_policy,
            "faults_injected": sum(injected.values()),
            "faults_recovered": sum(recovered.values()),
            "faults": {
                kind: {"injected": injected.get(kind, 0), "recovered": recovered.get(kind, 0)}
                for kind in dict.fromkeys([*injected, *recovered])
            },
            "faults_unrecovered": list(self.faults_unrecovered),
            "faults_interrupted": self.faults_interrupted,
            "faults_skipped": dict(self.faults_skipped),
            "interrupted": self.interrupted,
            "workdir": self.workdir,
            "kept_branches": list(self.kept_branches),
            "unmerged_branches": dict(self.unmerged_branches),
            "lost_commits": list(self.lost_commits),
            "writer_commits": list(self.writer_commits),
            "verdict": self.verdict,
        }


def percentile(values: Iterable[float], pct: float) -> float:
    """Nearest-rank percentile (0 for no values)."""
    ordered = sorted(values)
    if not ordered:
        return 0.0
    rank = max(1, math.ceil(pct / 100 * len(ordered)))
    return ordered[min(rank, len(ordered)) - 1]

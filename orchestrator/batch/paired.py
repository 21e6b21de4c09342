"""A sweep's settings compared on the same questions (pure functions).

Every setting of a sweep answers the same questions, so each is compared with the best one
question by question rather than as independent samples: a paired comparison sees a real
difference with far fewer questions than two separate intervals do (docs/suite-format.md,
"The decision").

* A question's **score** under a setting is its mean score over the epochs (``TaskResult.quality``,
  else whether it passed); it **passes** when that mean is at least one half.
* The **test** is McNemar's exact test on the questions where the two settings disagree: ``b``
  questions only the best passes, ``c`` only the other; under no difference each disagreement is a
  fair coin, so the two-sided p-value is ``min(1, 2 * P(X <= min(b, c)))`` with
  ``X ~ Binomial(b + c, 1/2)``. A difference is **detectable** when ``p < ALPHA``.
* The **difference** (other minus best, in score points) has a 95% interval from a paired bootstrap
  over questions (``RESAMPLES`` draws with a fixed seed, so the same results give the same interval).
* **How many questions** would detect a difference of ``EFFECT`` (ten points) with 80% power:
  Connor's sample size for McNemar's test, ``n = (z_a sqrt(psi) + z_b sqrt(psi - d^2))^2 / d^2``, with
  ``psi`` the share of questions the settings disagree on (as observed, but at least ``2 d``: a
  sweep that saw few disagreements says little about how many a larger one would see).
"""

from __future__ import annotations

import math
import random
from collections import defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final

from orchestrator.batch.results import TaskResult
from orchestrator.batch.sweep_stats import base_task_id

__all__ = [
    "ALPHA",
    "EFFECT",
    "RESAMPLES",
    "Paired",
    "compare_with_best",
    "mcnemar_exact",
    "question_scores",
    "questions_needed",
]

ALPHA: Final = 0.05
EFFECT: Final = 0.10
RESAMPLES: Final = 2000
_Z_ALPHA: Final = 1.959963984540054
_Z_POWER: Final = 0.8416212335729143


def question_scores(results: Sequence[TaskResult]) -> dict[str, float]:
    """Each question's mean score over its epochs."""
    scores: dict[str, list[float]] = defaultdict(list)
    for r in results:
        scores[base_task_id(r.id)].append(r.quality if r.quality is not None else (1.0 if r.status == "passed" else 0.0))
    return {q: sum(v) / len(v) for q, v in scores.items()}


def mcnemar_exact(b: int, c: int) -> float:
    """Two-sided exact p-value of ``b`` against ``c`` discordant pairs."""
    n = b + c
    if n == 0:
        return 1.0
    tail = sum(math.comb(n, k) for k in range(min(b, c) + 1)) / 2**n
    return min(1.0, 2 * tail)


def questions_needed(discordance: float, effect: float = EFFECT) -> int:
    """Questions that would detect ``effect`` with 80% power at ``ALPHA`` (module docstring)."""
    psi = max(discordance, 2 * effect)
    root = _Z_ALPHA * math.sqrt(psi) + _Z_POWER * math.sqrt(psi - effect * effect)
    return math.ceil(root * root / (effect * effect))


@dataclass(frozen=True)
class Paired:
    """``setting`` against the best, ``versus``, on the ``n`` questions both answered."""

    setting: str
    versus: str
    n: int
    best_only: int
    setting_only: int
    difference: float
    low: float
    high: float
    p: float

    @property
    def detectable(self) -> bool:
        return self.p < ALPHA

    @property
    def needed(self) -> int:
        """Questions that would detect a ten-point difference between these two."""
        return questions_needed((self.best_only + self.setting_only) / self.n if self.n else 0.0)

    def to_json(self) -> dict[str, Any]:
        return {
            "setting": self.setting, "versus": self.versus, "n": self.n, "best_only": self.best_only,
            "setting_only": self.setting_only, "difference": round(self.difference, 4), "low": round(self.low, 4),
            "high": round(self.high, 4), "p": round(self.p, 4), "test": "mcnemar-exact",
            "detectable": self.detectable, "questions_for_10_points": self.needed,
        }


def _bootstrap(differences: Sequence[float]) -> tuple[float, float]:
    if not differences:
        return 0.0, 0.0
    rng = random.Random(0)
    n = len(differences)
    means = sorted(sum(rng.choices(differences, k=n)) / n for _ in range(RESAMPLES))
    return means[int(0.025 * RESAMPLES)], means[int(0.975 * RESAMPLES) - 1]


def compare_with_best(scores: Mapping[str, Mapping[str, float]], best: str) -> list[Paired]:
    """Every setting of ``scores`` (label -> question -> score) against ``best``, in order."""
    out = []
    top = scores[best]
    for label, mine in scores.items():
        shared = sorted(set(mine) & set(top))
        b = sum(top[q] >= 0.5 > mine[q] for q in shared)
        c = sum(mine[q] >= 0.5 > top[q] for q in shared)
        differences = [mine[q] - top[q] for q in shared]
        low, high = _bootstrap(differences)
        mean = sum(differences) / len(differences) if differences else 0.0
        out.append(Paired(label, best, len(shared), b, c, mean, low, high, mcnemar_exact(b, c)))
    return out

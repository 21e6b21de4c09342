"""Spending limits: what one scope may spend, what it has spent, and the stop when it cannot go on (B1).

A scope is a turn, a session, one launch of a background subagent (reflection, compaction, the
merge resolver), a batch task or a batch run; a measure is tokens, model calls, wall seconds or
cost (USD at the configured prices). The caps are settings (``[limits]`` of ``base/config.py``);
this module turns them into a :class:`Limits` per scope and names a reached one
(``session.cost``), the way inspect_ai records which of a sample's limits stopped it.

A reached limit is a clean stop, never a failure: the code that owns the scope catches
:class:`LimitReached` and settles with status ``limit`` (a turn, a subagent's outcome, a batch
task), publishing a :class:`LimitHit` (``limit.reached``, ``docs/events.md``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar, Literal

from orchestrator.base.config import Settings
from orchestrator.base.errors import ReverieError
from orchestrator.base.events import Event

__all__ = ["MEASURES", "LimitHit", "LimitReached", "Limits", "Measure", "Prices", "describe_limit", "limits_for"]

Measure = Literal["tokens", "calls", "seconds", "cost"]
MEASURES: tuple[Measure, ...] = ("tokens", "calls", "seconds", "cost")
_UNITS = {"tokens": "tokens", "calls": "model calls", "seconds": "s", "cost": "USD"}


@dataclass(frozen=True)
class Prices:
    """USD per million prompt and completion tokens (``[model] price_in/price_out``); 0 when unset."""

    prompt: float = 0.0
    completion: float = 0.0

    @classmethod
    def of(cls, settings: Settings) -> Prices:
        return cls(settings.price_in or 0.0, settings.price_out or 0.0)

    def cost(self, prompt_tokens: int, completion_tokens: int) -> float:
        return (prompt_tokens * self.prompt + completion_tokens * self.completion) / 1e6


@dataclass(frozen=True)
class Limits:
    """The caps of one scope (``None``: no cap on that measure)."""

    scope: str
    tokens: int | None = None
    calls: int | None = None
    seconds: float | None = None
    cost: float | None = None

    def cap(self, measure: Measure) -> float | None:
        value: float | None = getattr(self, measure)
        return value

    @property
    def any(self) -> bool:
        return any(self.cap(m) is not None for m in MEASURES)


def limits_for(settings: Settings, scope: str) -> Limits:
    """The caps ``settings`` give ``scope`` (``turn``, ``session``, ``reflection``, ``compaction``,
    ``resolver``, ``task``), a subagent's derived defaults included (B2)."""
    values = {
        measure: settings.effective(f"limit_{scope}_{measure}")
        for measure in MEASURES
        if hasattr(settings, f"limit_{scope}_{measure}")
    }
    return Limits(scope, **values)


def describe_limit(limit: str, cap: float) -> str:
    """``session.cost`` and its cap as people read them: ``the session's cost limit (0.01 USD)``."""
    scope, _, measure = limit.partition(".")
    shown = f"{cap:g}" if measure != "tokens" else f"{int(cap):,}"
    return f"the {scope} {measure} limit ({shown} {_UNITS.get(measure, '')})".replace(" )", ")")


class LimitReached(ReverieError):
    """A request was not sent (or a scope not started) because ``limit`` (``scope.measure``) would
    be crossed; ``spent`` is what the scope had spent, ``needed`` what the request would have added."""

    def __init__(self, limit: str, cap: float, spent: float, needed: float = 0.0) -> None:
        scope, _, measure = limit.partition(".")
        super().__init__(
            f"stopped at {describe_limit(limit, cap)}: spent {_amount(limit, spent)}; "
            f"raise [limits] {scope}_{measure} to go on"
        )
        self.limit = limit
        self.cap = cap
        self.spent = spent
        self.needed = needed

    def event(self, subject: str = "") -> LimitHit:
        scope, _, measure = self.limit.partition(".")
        return LimitHit(self.limit, scope, measure, self.cap, self.spent, self.needed, subject)


def _amount(limit: str, value: float) -> str:
    measure = limit.partition(".")[2]
    if measure == "tokens":
        return f"{int(value):,} tokens"
    if measure == "calls":
        return f"{int(value)} model calls"
    if measure == "seconds":
        return f"{value:.1f} s"
    return f"{value:.6f} USD"


@dataclass(frozen=True)
class LimitHit(Event):
    """A scope stopped at one of its limits (``limit.reached``): which (``session.cost``), its cap,
    what was spent and what the refused request would have added; ``subject`` names the subagent
    launch or batch task it stopped, when that is not the conversation's turn."""

    kind: ClassVar[str] = "limit.reached"
    limit: str
    scope: str
    measure: str
    cap: float
    spent: float
    needed: float = 0.0
    subject: str = ""

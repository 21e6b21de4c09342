"""What a chat has used: model calls and tokens from the store's ``model.call`` events, the main
agent's (``purpose`` ``chat``) apart from its subagents' (summaries, reflections, merge
resolution), and their cost when prices are configured (``[model] price_in, price_out``, USD per
million tokens, as ``reverie run --price-in/--price-out``).

The events are the one record every process shares: a session's totals are the events after the
mark taken when it opened, a conversation's are all of its events, so ``/cost`` agrees with
``reverie events`` and with a second process's view.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from orchestrator.base.config import Settings
from orchestrator.store import Store
from orchestrator.store.records import Event

__all__ = ["PARTS", "Tally", "UsageSplit", "cost_of", "limit_lines", "priced", "usage_split"]

PARTS = {"chat": "main agent", "reflect": "reflection", "summarize": "compaction", "resolve": "resolver"}
"""Who spent a ``model.call``, by its ``purpose``: the main agent and each subagent apart (B1)."""


@dataclass(frozen=True)
class Tally:
    """Model calls and their tokens."""

    calls: int = 0
    prompt_tokens: int = 0
    completion_tokens: int = 0

    def __add__(self, other: Tally) -> Tally:
        return Tally(
            self.calls + other.calls,
            self.prompt_tokens + other.prompt_tokens,
            self.completion_tokens + other.completion_tokens,
        )


@dataclass(frozen=True)
class UsageSplit:
    """The main agent's calls and its subagents' calls, apart; ``parts``: by who made them (``PARTS``)."""

    agent: Tally
    subagents: Tally
    parts: Mapping[str, Tally] = field(default_factory=dict)

    @property
    def total(self) -> Tally:
        return self.agent + self.subagents


def priced(settings: Settings) -> bool:
    return settings.price_in is not None or settings.price_out is not None


def cost_of(tally: Tally, settings: Settings) -> float:
    """USD for ``tally`` at the configured prices (a missing price counts as 0)."""
    cost = tally.prompt_tokens * (settings.price_in or 0.0) + tally.completion_tokens * (settings.price_out or 0.0)
    return round(cost / 1e6, 6)


def _tally(events: Iterable[Event]) -> Tally:
    calls = list(events)
    return Tally(
        len(calls),
        sum(int(c.payload.get("prompt_tokens", 0)) for c in calls),
        sum(int(c.payload.get("completion_tokens", 0)) for c in calls),
    )


async def usage_split(
    store: Store, agent_id: str, *, conversation_id: str | None = None, after_id: int = 0
) -> UsageSplit:
    """The agent's ``model.call`` events after ``after_id`` (of one conversation, when given)."""
    calls = await store.events(
        agent_id=agent_id, conversation_id=conversation_id, kinds=["model.call"], after_id=after_id
    )
    return UsageSplit(
        agent=_tally(c for c in calls if c.payload.get("purpose", "chat") == "chat"),
        subagents=_tally(c for c in calls if c.payload.get("purpose", "chat") != "chat"),
        parts={
            part: _tally(c for c in calls if c.payload.get("purpose", "chat") == purpose)
            for purpose, part in PARTS.items()
        },
    )


def limit_lines(settings: Settings, report: Mapping[str, Mapping[str, float]]) -> list[str]:
    """``/cost``'s limits block: the session's spend against each of its limits (``report``: the
    session meter's, ``Meter.report``), then the caps each subagent launch runs under (B1, B2)."""
    lines = ["limits"]
    for name, row in report.items():
        lines.append(f"  {name:22}{_shown(name, row['spent'])} of {_shown(name, row['cap'])}")
    for kind in ("reflection", "compaction", "resolver"):
        caps = [
            _shown(f"{kind}.{measure}", value)
            for measure in ("tokens", "calls", "seconds", "cost")
            if (value := settings.effective(f"limit_{kind}_{measure}")) is not None
        ]
        lines.append(f"  {kind + ' (each launch)':22}{', '.join(caps)}")
    return lines


def _shown(limit: str, value: float) -> str:
    measure = limit.rpartition(".")[2]
    if measure == "cost":
        return f"${value:.4f}"
    if measure == "seconds":
        return f"{value:,.0f} s"
    return f"{int(value):,} {measure}"

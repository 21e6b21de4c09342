"""What model calls used and what they cost: the one place a token count becomes USD.

Usage is read from the store's ``model.call`` events, the main agent's (``purpose`` ``chat``) apart
from its subagents' (summaries, reflections, merge resolution). The events are the one record every
process shares: a session's totals are the events after the mark taken when it opened, a
conversation's are all of its events, so ``/cost`` agrees with ``reverie events`` and with a second
process's view. ``parts`` splits them by who made them (``PARTS``: the main agent, reflection,
compaction, the resolver), as ``/cost`` and a json result's ``spend`` show them, and
``limit_lines`` sets the session meter's spend against its limits (B1).

Cost is ``cost_usd``: prices are USD per million tokens (``[model] price_in, price_out``, ``reverie
run --price-in/--price-out``), a missing one counts as 0, and no price at all means no cost. A
chat's ``/cost``, its per-turn result, the toolbar, the library's ``Session``, a batch run's
results and its ``--estimate`` all price tokens through it (docs/api.md), with the budget meter's
formula (``base/limits.Prices.cost``).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from orchestrator.base.config import Settings
from orchestrator.base.limits import Prices
from orchestrator.store import Store
from orchestrator.store.records import Event

__all__ = ["PARTS", "Tally", "UsageSplit", "cost_usd", "limit_lines", "usage_split"]

PARTS = {"chat": "main agent", "reflect": "reflection", "summarize": "compaction", "resolve": "resolver"}
"""Who spent a ``model.call``, by its ``purpose``: the main agent and each subagent apart (B1)."""


def cost_usd(prompt_tokens: int, completion_tokens: int, price_in: float | None, price_out: float | None) -> float | None:
    """USD for these tokens at ``price_in``/``price_out`` per million (the budget meter's own
    ``Prices.cost``, rounded to the micro-dollar); None when neither is given."""
    if price_in is None and price_out is None:
        return None
    return round(Prices(price_in or 0.0, price_out or 0.0).cost(prompt_tokens, completion_tokens), 6)


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

"""One chat turn as the CLI runs it: interruptible by Ctrl-C, measured, and summarised as a result.

Ctrl-C is SIGINT, received by a signal watcher on the session's loop (anyio's signal receiver,
main thread, both backends). During a turn it cancels the turn's cancel scope: the model request
and a running tool (its process group) are cancelled, the turn loop stores the turn as
``interrupted`` with what was streamed, and the REPL goes back to the prompt. Outside a turn the
owner decides (``idle``): the REPL ignores it (at its prompt Ctrl-C is a key, not a signal),
headless modes leave with 130.

Exit codes (D13): 0 done, 1 error, 3 stopped at ``max_steps``, 4 stopped at a limit (B1: the
turn's or the session's tokens, cost or time), 130 interrupted.
"""

from __future__ import annotations

import signal
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Any

import anyio

from orchestrator.agent.turn import TurnOutcome
from orchestrator.app.session import ChatSession
from orchestrator.app.usage import Tally, UsageSplit
from orchestrator.cli.render import TerminalRenderer

__all__ = [
    "EXIT_CODES",
    "Interrupts",
    "TurnResult",
    "exit_code",
    "run_turn",
    "warn_unused_model",
]

EXIT_CODES = {"end_turn": 0, "error": 1, "max_steps": 3, "limit": 4, "interrupted": 130, "cancelled": 130}


def exit_code(status: str) -> int:
    return EXIT_CODES.get(status, 1)


@dataclass(frozen=True)
class TurnResult:
    """What a script gets for one message (the ``json`` output and stream-json's last line)."""

    agent_id: str
    conversation_id: str
    turn_id: str | None
    status: str
    reply: str
    error: str | None
    steps: int
    usage: dict[str, int]
    subagent_usage: dict[str, int]
    memory_before: str | None
    memory_after: str | None
    warnings: tuple[str, ...] = ()
    """What reverie repaired or refused in the memory repository during the turn (one line each,
    already printed on stderr when found)."""
    cost: dict[str, float] | None = None
    """USD, ``{"total", "agent", "subagents"}``, when prices are configured."""
    spend: dict[str, dict[str, float]] | None = None
    """The turn's model calls (and cost, when priced) by who made them: ``main agent``,
    ``reflection``, ``compaction``, ``resolver`` (B1); with prices or session limits only."""
    limits: dict[str, dict[str, float]] | None = None
    """The session's spend against each of its limits so far, by limit (``session.cost``)."""

    @property
    def exit_code(self) -> int:
        return exit_code(self.status)

    def to_json(self) -> dict[str, Any]:
        return {
            "type": "result",
            "status": self.status,
            "exit_code": self.exit_code,
            "reply": self.reply,
            "error": self.error,
            "turn_id": self.turn_id,
            "conversation_id": self.conversation_id,
            "agent_id": self.agent_id,
            "steps": self.steps,
            "usage": {**self.usage, "subagents": self.subagent_usage},
            "memory": {"before": self.memory_before, "after": self.memory_after},
            "warnings": list(self.warnings),
            **({"cost": self.cost} if self.cost is not None else {}),
            **({"spend": self.spend} if self.spend is not None else {}),
            **({"limits": self.limits} if self.limits is not None else {}),
        }


@dataclass
class Interrupts:
    """SIGINT on the session's loop: cancels the running turn, else calls ``idle``."""

    idle: Callable[[], None] = lambda: None
    _turn: anyio.CancelScope | None = None
    received: int = field(default=0)
    pending: bool = False
    """Set by an ``idle`` that means "cancel the turn about to start" (the REPL, between the
    Enter and the turn's start); cleared when a prompt is shown again."""

    async def watch(self) -> None:
        with anyio.open_signal_receiver(signal.SIGINT) as signals:
            async for _ in signals:
                self.received += 1
                if self._turn is not None:
                    self._turn.cancel()
                else:
                    self.idle()


async def run_turn(
    session: ChatSession,
    text: str,
    renderer: TerminalRenderer,
    interrupts: Interrupts,
    *,
    after_turn: Callable[[], Any] | None = None,
) -> TurnResult:
    """Send ``text``; Ctrl-C cancels just this turn. ``after_turn`` (e.g. the S23 wait) runs
    before the memory revision after and the subagent usage are read."""
    before = await session.memory_head()
    mark = await session.runtime.store.last_event_id()
    renderer.turn_id = None
    renderer.streamed = ""
    outcome = None
    with anyio.CancelScope() as scope:
        interrupts._turn = scope
        if interrupts.pending:
            interrupts.pending = False
            scope.cancel()
        try:
            outcome = await session.send(text)
        finally:
            interrupts._turn = None
    renderer.finish()
    if after_turn is not None:
        await after_turn()
    after = await session.memory_head()
    split = await session.usage(after_id=mark)
    subagents = split.subagents
    extra = {"prompt_tokens": subagents.prompt_tokens, "completion_tokens": subagents.completion_tokens, "calls": subagents.calls}
    result = await _result(session, renderer, outcome, mark, before, after, extra)
    result = replace(result, **_spend(session, split))
    agent = Tally(result.steps, result.usage["prompt_tokens"], result.usage["completion_tokens"])
    agent_cost, subagent_cost = session.cost(agent), session.cost(subagents)
    if agent_cost is None or subagent_cost is None:
        return result
    return replace(result, cost={"total": round(agent_cost + subagent_cost, 6), "agent": agent_cost, "subagents": subagent_cost})


def _spend(session: ChatSession, split: UsageSplit) -> dict[str, Any]:
    """``spend`` and ``limits`` of the result (B1): the turn's calls (``split``) by who made them, and
    the session's spend against its limits; nothing when there is neither a price nor a limit
    (``usage`` says it all, and the result stays as small as it was)."""
    meter = session.context.meter
    limits = meter.report() if meter is not None else {}
    priced = session.cost(Tally()) is not None
    if not limits and not priced:
        return {}
    spend: dict[str, dict[str, float]] = {}
    for part, tally in split.parts.items():
        row: dict[str, float] = {
            "calls": tally.calls, "prompt_tokens": tally.prompt_tokens, "completion_tokens": tally.completion_tokens
        }
        cost = session.cost(tally)
        if cost is not None:
            row["cost"] = cost
        spend[part] = row
    return {"spend": spend, "limits": limits}


async def _result(
    session: ChatSession,
    renderer: TerminalRenderer,
    outcome: TurnOutcome | None,
    mark: int,
    before: str | None,
    after: str | None,
    extra: dict[str, int],
) -> TurnResult:
    if outcome is not None:
        return TurnResult(
            agent_id=session.agent.agent_id,
            conversation_id=outcome.conversation_id,
            turn_id=outcome.turn_id,
            status=outcome.status,
            reply=outcome.text,
            error=outcome.error,
            steps=outcome.steps,
            usage={"prompt_tokens": outcome.usage.prompt_tokens, "completion_tokens": outcome.usage.completion_tokens},
            subagent_usage=extra,
            memory_before=before,
            memory_after=after,
            warnings=outcome.sync.warnings if outcome.sync is not None else (),
        )
    turn = await session.last_turn()
    turn_id = turn.id if turn is not None else renderer.turn_id
    chat_calls = await session.runtime.store.events(
        agent_id=session.agent.agent_id, kinds=["model.call"], after_id=mark
    )
    mine = [c for c in chat_calls if c.payload.get("purpose", "chat") == "chat"]
    return TurnResult(
        agent_id=session.agent.agent_id,
        conversation_id=session.conversation_id,
        turn_id=turn_id,
        status=turn.status if turn is not None and turn.status != "running" else "interrupted",
        reply=renderer.streamed,
        error=turn.error if turn is not None else "the turn was interrupted",
        steps=len(mine),
        usage={
            "prompt_tokens": sum(int(c.payload.get("prompt_tokens", 0)) for c in mine),
            "completion_tokens": sum(int(c.payload.get("completion_tokens", 0)) for c in mine),
        },
        subagent_usage=extra,
        memory_before=before,
        memory_after=after,
    )


def warn_unused_model(session: Any, model: str | None, say: Callable[[str], None]) -> None:
    """Say once that ``--model`` changes nothing when no endpoint is configured (the scripted model answers)."""
    if model and not session.settings.uses_endpoint:
        say(
            f"reverie: warning: --model {model} has no effect without an endpoint "
            "(set REVERIE_BASE_URL or model.base_url); using the scripted model"
        )

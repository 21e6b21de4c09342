"""Replayed history (``ChatSession.replay``): recorded exchanges count steps and context exactly as
live turns do, fire the step-count trigger and compaction, cost nothing, and carry their dates."""

from __future__ import annotations

from pathlib import Path

import pytest

from orchestrator.agent.replay import REPLAY_MODEL
from orchestrator.app.session import ChatSession
from orchestrator.base.events import Event
from orchestrator.models.scripted import ScriptedModel
from subagents.reflection import render_transcript

pytestmark = pytest.mark.anyio

LINES = ["my name is Ada Lovelace", "what a nice day it is today", "tell me something about gardens", "and now?"]


class Seen:
    def __init__(self) -> None:
        self.events: list[Event] = []

    async def __call__(self, event: Event) -> None:
        self.events.append(event)

    def kinds(self) -> list[str]:
        return [e.kind for e in self.events]


async def _live_then_record(tmp_path: Path, cli: dict[str, object]) -> tuple[list[tuple[str, str]], list[int], int]:
    """Live turns with the scripted model: what it answered, each turn's steps, the context after."""
    async with ChatSession.open(agent_id="aaaa", workspace=tmp_path / "w1", cli=cli) as session:
        pairs, steps = [], []
        for line in LINES:
            outcome = await session.send(line)
            pairs.append((line, outcome.text))
            steps.append(outcome.steps)
        context = (await session.context_use()).tokens
        assert await session.supervisor.drain(30)
    return pairs, steps, context


async def test_replay_counts_steps_and_context_as_the_live_turns_did(tmp_path: Path) -> None:
    off = {"reflection_trigger": "off"}
    pairs, live_steps, live_context = await _live_then_record(tmp_path, off)
    model = ScriptedModel()
    async with ChatSession.open(agent_id="bbbb", workspace=tmp_path / "w2", cli=off, model=model) as session:
        outcomes = [await session.replay(user, assistant) for user, assistant in pairs]
        assert [o.steps for o in outcomes] == live_steps
        assert [o.text for o in outcomes] == [a for _, a in pairs]
        assert (await session.context_use()).tokens == live_context
        assert [r.purpose for r in model.requests] == []  # no chat request reached the model
        stored = await session.runtime.store.in_context(session.conversation_id)
        said = [(m.message.role, m.message.content) for m in stored if m.message.kind == "message"]
        assert said == [(role, text) for pair in pairs for role, text in zip(("user", "assistant"), pair, strict=True)]


async def test_replayed_steps_fire_the_step_count_trigger(tmp_path: Path) -> None:
    seen = Seen()
    cli = {"reflection_trigger": "step-count", "reflection_step_count": 3}
    async with ChatSession.open(agent_id="trig", workspace=tmp_path, cli=cli, observer=seen) as session:
        await session.replay("my name is Ada Lovelace", "Nice to meet you, Ada.")
        await session.replay("what a nice day", "It is.")
        assert "reflection.launch" not in seen.kinds()
        await session.replay("tell me something", "Gardens are nice.")
        assert seen.kinds().count("reflection.launch") == 1
        assert await session.supervisor.drain(30)
        assert "Ada Lovelace" in (session.agent.memory_dir / "human.md").read_text(encoding="utf-8")
        records = await session.runtime.store.reflections("trig")
        assert [r.status for r in records] == ["merged"]


async def test_replay_compacts_a_full_window_and_only_subagents_call_the_model(tmp_path: Path) -> None:
    seen = Seen()
    model = ScriptedModel()
    cli = {"reflection_trigger": "compaction-event", "context_window": 3000}
    async with ChatSession.open(agent_id="full", workspace=tmp_path, cli=cli, observer=seen, model=model) as session:
        for n in range(8):
            await session.replay(f"point {n}: " + "the garden needs water " * 30, f"Noted point {n}. " + "ok " * 80)
        assert await session.supervisor.drain(30)
        assert "compaction.done" in seen.kinds()
        assert "reflection.launch" in seen.kinds()  # the compaction armed the trigger
        assert {r.purpose for r in model.requests} <= {"summarize", "reflect"}
        calls = [e for e in seen.events if e.kind == "model.call" and getattr(e, "purpose", "") == "replay"]
        assert len(calls) == 8 and all(getattr(e, "model", "") == REPLAY_MODEL for e in calls)


async def test_replayed_messages_carry_their_date_for_search(tmp_path: Path) -> None:
    async with ChatSession.open(agent_id="dated", workspace=tmp_path, cli={"reflection_trigger": "off"}) as session:
        await session.replay("I redeemed a coupon at Target", "Nice!", at="2023-05-20T02:21:00.000Z")
        hits = await session.runtime.store.search("coupon", agent_id="dated")
        assert hits and hits[0].fields["date"].startswith("2023-05-20T02:21:00")
        before = await session.runtime.store.search("coupon", agent_id="dated", end_date="2023-05-19")
        assert before == []
        (reply,) = await session.runtime.store.search("Nice!", agent_id="dated")
        assert reply.message_type == "assistant_message" and reply.fields["date"].startswith("2023-05-20T02:21:00")


async def test_a_reflection_reads_the_replayed_dates(tmp_path: Path) -> None:
    async with ChatSession.open(agent_id="when", workspace=tmp_path, cli={"reflection_trigger": "off"}) as session:
        await session.replay("I went to MoMA", "Lovely.", at="2023-01-08T12:49:00.000Z")
        await session.replay("And then the Met", "Great.", at="2023-01-15T00:27:00.000Z")
        stored = await session.runtime.store.transcript(session.conversation_id, 0)
    text = render_transcript(stored)
    assert text.index("[date] 2023-01-08T12:49:00.000Z") < text.index("[user] I went to MoMA")
    assert text.index("[assistant] Lovely.") < text.index("[date] 2023-01-15T00:27:00.000Z") < text.index("[user] And then the Met")
    assert text.count("[date]") == 2

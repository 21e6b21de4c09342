"""D4 end to end: real turns in small windows with the scripted model. The newest message
reaches the model whole (or the turn is refused in one line), and the outcome does not depend on how
long the paths in the prompt are."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from orchestrator.app.session import ChatSession
from orchestrator.batch.runner import RunOptions, run_task
from orchestrator.batch.suite import load_suite

EXAMPLES = Path(__file__).resolve().parents[2] / "examples" / "suite.jsonl"
_TOPICS = ("the garden", "the harbour", "the budget", "the migration", "the onboarding", "the release")


def _long_message(i: int) -> str:
    topic = _TOPICS[i % len(_TOPICS)]
    return f"message {i} about {topic}: " + " ".join(f"{topic} detail {i}.{j}" for j in range(45))


@pytest.mark.anyio
@pytest.mark.slow
async def test_thirty_turns_in_a_3000_token_window_keep_every_newest_message_whole() -> None:
    async with ChatSession.open(agent_id="window", cli={"context_window": 3000}) as chat:
        for i in range(30):
            text = _long_message(i)
            outcome = await chat.send(text)
            assert outcome.status == "end_turn", outcome.error
            assert text in outcome.text, f"turn {i}: the reply lost part of the message"
        await chat.finish_one_shot()
        store = chat.runtime.store
        done = await store.events(conversation_id=chat.conversation_id, kinds=["compaction.done"])
        assert len(done) >= 2
        calls = await store.events(kinds=["model.call"])
        assert calls and all(int(c.payload["prompt_tokens"]) <= 3000 for c in calls)
        assert {"chat", "summarize", "reflect"} <= {c.payload["purpose"] for c in calls}
        assert all(c.agent_id == "window" and c.conversation_id == chat.conversation_id for c in calls)
        history = await store.in_context(chat.conversation_id)
        assert history[-2].message.content == _long_message(29)


@pytest.mark.anyio
async def test_a_window_too_small_refuses_the_turn_in_one_line() -> None:
    async with ChatSession.open(agent_id="tiny", cli={"context_window": 600}) as chat:
        outcome = await chat.send("call me Admiral")
        assert outcome.status == "error" and outcome.error is not None
        assert "\n" not in outcome.error
        assert "600 tokens" in outcome.error and "--context-window" in outcome.error
        assert "need at least" in outcome.error
        store = chat.runtime.store
        transcript = await store.transcript(chat.conversation_id, 0)
        assert [m.message.content for m in transcript if m.message.role == "user" and m.message.kind == "message"] == [
            "call me Admiral"
        ]
        assert not [m for m in transcript if m.message.role == "assistant"], "nothing was sent to the model"
        assert not await store.events(kinds=["model.call"])
        again = await chat.send("still there?")
        assert again.status == "error", "the refusal leaves the conversation usable and consistent"


@pytest.mark.anyio
@pytest.mark.parametrize("depth", [1, 12])
async def test_reflect_compaction_event_passes_under_short_and_long_paths(tmp_path: Path, depth: int) -> None:
    out = tmp_path.joinpath(*(["d" * 11] * depth)) / "run"
    task = next(t for t in load_suite(EXAMPLES) if t.id == "reflect-compaction-event")
    result = await run_task(task, RunOptions(out_dir=out))
    assert len(str(out)) > 150 or depth == 1
    assert result.status == "passed", json.dumps(result.to_json())[:800]
    assert "anything else" in result.final_answer

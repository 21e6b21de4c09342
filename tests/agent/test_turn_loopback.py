"""Whole turns through the openai SDK against the loopback server (never a patched SDK)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from orchestrator.app.session import ChatSession
from orchestrator.models.openai_client import OpenAIModel
from orchestrator.testing.openai_server import (
    LoopbackOpenAI,
    Planned,
    PlannedToolCall,
    rate_limited,
    server_error,
    stall,
    text_reply,
    tool_call_reply,
)
from tests.support import SleepRecorder

pytestmark = pytest.mark.anyio


@pytest.fixture
def server() -> Iterator[LoopbackOpenAI]:
    with LoopbackOpenAI() as srv:
        yield srv


def _model(server: LoopbackOpenAI, waits: SleepRecorder, **kw: object) -> OpenAIModel:
    return OpenAIModel(base_url=server.base_url, model="loopback-model", sleep=waits, max_attempts=3, **kw)  # type: ignore[arg-type]


async def test_rate_limited_then_success_completes_the_turn(server: LoopbackOpenAI, tmp_path: Path) -> None:
    waits = SleepRecorder()
    server.enqueue(rate_limited(retry_after=7), text_reply("hello back"))
    async with ChatSession.open(agent_id="a1", model=_model(server, waits), workspace=tmp_path) as session:
        outcome = await session.send("hi")
        assert outcome.status == "end_turn" and outcome.text == "hello back"
        assert 7 in waits.delays
        history = await session.runtime.store.in_context(session.conversation_id)
        assert [m.message.role for m in history][-2:] == ["user", "assistant"]


async def test_persistent_500_ends_turn_with_clear_error_and_consistent_store(
    server: LoopbackOpenAI, tmp_path: Path
) -> None:
    waits = SleepRecorder()
    server.enqueue(*[server_error("upstream exploded")] * 3, text_reply("recovered"))
    async with ChatSession.open(agent_id="a1", model=_model(server, waits), workspace=tmp_path) as session:
        outcome = await session.send("hi")
        assert outcome.status == "error"
        assert outcome.error is not None and "\n" not in outcome.error and "500" in outcome.error
        store = session.runtime.store
        turns = await store.turns(session.conversation_id)
        assert turns[-1].status == "error"
        history = await store.in_context(session.conversation_id)
        assert history[-1].message.role == "user"
        again = await session.send("still there?")
        assert again.status == "end_turn" and again.text == "recovered"


async def test_malformed_tool_arguments_become_an_error_result(server: LoopbackOpenAI, tmp_path: Path) -> None:
    server.enqueue(tool_call_reply("bash", '{"command": "echo hi'), text_reply("sorry"))
    async with ChatSession.open(agent_id="a1", model=_model(server, SleepRecorder()), workspace=tmp_path) as session:
        outcome = await session.send("run it")
        assert outcome.status == "end_turn"
        history = await session.runtime.store.in_context(session.conversation_id)
        tool = [m for m in history if m.message.role == "tool"][-1]
        assert tool.message.content.startswith("Error: bash:")
        assert tool.metadata["ok"] is False
        replay = server.chat_bodies[-1]["messages"]
        assistant = [m for m in replay if m["role"] == "assistant"][-1]
        assert assistant["content"] == "" and assistant["tool_calls"][0]["function"]["arguments"] == '{"command": "echo hi'


async def test_stalled_stream_hits_the_idle_timeout(server: LoopbackOpenAI, tmp_path: Path) -> None:
    server.enqueue(*[stall(seconds=5)] * 3)
    model = _model(server, SleepRecorder(), idle_timeout=0.3)
    async with ChatSession.open(agent_id="a1", model=model, workspace=tmp_path) as session:
        outcome = await session.send("hi")
        assert outcome.status == "error" and outcome.error is not None
        assert "idle" in outcome.error or "timed out" in outcome.error or "stall" in outcome.error


async def test_repeated_id_deltas_make_one_tool_call_that_runs(server: LoopbackOpenAI, tmp_path: Path) -> None:
    call = PlannedToolCall("bash", json.dumps({"command": "echo assembled-$AGENT_ID"}), "call_fixed")
    server.enqueue(Planned(tool_calls=(call,), tool_call_style="repeat", chunk_size=3), text_reply("done"))
    async with ChatSession.open(agent_id="a1", model=_model(server, SleepRecorder()), workspace=tmp_path) as session:
        outcome = await session.send("go")
        assert outcome.tool_calls == ("bash",)
        history = await session.runtime.store.in_context(session.conversation_id)
        assistant = [m for m in history if m.message.tool_calls][-1]
        assert [(c.id, c.name) for c in assistant.message.tool_calls] == [("call_fixed", "bash")]
        tool = [m for m in history if m.message.role == "tool"][-1]
        assert tool.message.content.strip() == "assembled-a1"


async def test_retries_are_shown_to_the_user_while_they_happen(server: LoopbackOpenAI, tmp_path: Path) -> None:
    from orchestrator.base.events import Event, ModelRetrying

    seen: list[Event] = []

    async def observe(event: Event) -> None:
        seen.append(event)

    server.enqueue(server_error("upstream hiccup"), text_reply("fine"))
    async with ChatSession.open(agent_id="a1", model=_model(server, SleepRecorder()), workspace=tmp_path, observer=observe) as session:
        outcome = await session.send("hi")
    assert outcome.text == "fine"
    notices = [e.message for e in seen if isinstance(e, ModelRetrying)]
    assert len(notices) == 1 and "upstream hiccup" in notices[0] and "retry 2/3" in notices[0]


async def test_an_oversized_write_file_is_refused_before_writing_and_the_conversation_goes_on(
    server: LoopbackOpenAI, tmp_path: Path
) -> None:
    """A8: 900 KB of write_file content is refused with the limit named, nothing is
    written, the call is kept without its content, and the next request fits the window (it failed
    before, blaming the user's message)."""
    from orchestrator.tools import WRITE_MAX_CHARS

    big = json.dumps({"path": "big.txt", "content": "x" * 900_000})
    server.enqueue(tool_call_reply("write_file", big, chunk_size=64 * 1024))
    async with ChatSession.open(agent_id="a1", model=_model(server, SleepRecorder()), workspace=tmp_path) as session:
        first = await session.send("write the big file")
        second = await session.send("and now?")
        history = await session.runtime.store.in_context(session.conversation_id)
    assert (first.status, second.status) == ("end_turn", "end_turn"), (first.error, second.error)
    assert not (tmp_path / "big.txt").exists()
    tool = next(m for m in history if m.message.role == "tool")
    assert tool.message.content.startswith("Error: the content is 900,000 characters")
    assert f"{WRITE_MAX_CHARS:,}" in tool.message.content and "your message" not in tool.message.content
    assert all(len(json.dumps(body)) < 100_000 for body in server.chat_bodies[1:])

from __future__ import annotations

from collections.abc import Awaitable, Callable
from functools import partial
from pathlib import Path

import anyio
import anyio.to_thread
import pytest

from orchestrator.agent.prompt_cache import PromptAction, decide
from orchestrator.app.session import ChatSession
from orchestrator.models.scripted import ScriptedModel
from orchestrator.models.types import Message, ModelRequest, ModelResponse, ToolCall
from orchestrator.store import PromptRecord
from tests.support import running_with, wait_until

pytestmark = pytest.mark.anyio


def _row(revision: str | None, sent: bool, raw_hash: str = "h") -> PromptRecord:
    return PromptRecord("c", "a", "content", "core", "t", raw_hash, revision, "memfs-v2", "t" if sent else None)


@pytest.mark.parametrize(
    ("row", "revision", "expected"),
    [
        (None, "r1", PromptAction.FULL_COMPILE),
        (_row("r1", True, raw_hash="other"), "r1", PromptAction.FULL_COMPILE),
        (_row("r1", True), "r1", PromptAction.REUSE),
        (_row(None, True), None, PromptAction.REUSE),
        (_row("r1", False), "r2", PromptAction.UNSENT_RECOMPILE),
        (_row("r1", True), "r2", PromptAction.MEMORY_CHANGED),
        (_row("r1", True), None, PromptAction.FULL_COMPILE),
    ],
)
def test_prompt_decision_table(row: PromptRecord | None, revision: str | None, expected: PromptAction) -> None:
    assert decide(row, "h", revision) is expected


def _bash(command: str, call_id: str = "c1") -> ModelResponse:
    import json

    return ModelResponse(
        Message("assistant", "", tool_calls=(ToolCall(call_id, "bash", json.dumps({"command": command})),))
    )


async def test_max_steps_stops_the_tool_loop(tmp_path: Path) -> None:
    model = ScriptedModel(script=[_bash("echo 1", "a"), _bash("echo 2", "b"), _bash("echo 3", "c")], strict=True)
    async with ChatSession.open(agent_id="a1", model=model, workspace=tmp_path, cli={"max_steps": 2}) as session:
        outcome = await session.send("loop forever")
        assert outcome.status == "max_steps" and outcome.steps == 2
        history = await session.runtime.store.in_context(session.conversation_id)
        calls = [c.id for m in history for c in m.message.tool_calls]
        answered = [m.message.tool_call_id for m in history if m.message.role == "tool"]
        assert calls == answered == ["a", "b"]


async def test_the_write_limit_setting_reaches_the_bash_tool(tmp_path: Path) -> None:
    model = ScriptedModel(script=[_bash("head -c 3000000 /dev/zero > big"), ModelResponse(Message("assistant", "done"))])
    async with ChatSession.open(agent_id="a1", model=model, workspace=tmp_path, cli={"write_limit_mb": 2}) as session:
        await session.send("write a big file")
        history = await session.runtime.store.in_context(session.conversation_id)
        [result] = [m.message.content for m in history if m.message.role == "tool"]
        assert result.startswith("Error: Command stopped: a file was cut at the write limit, 2 MiB per file"), result
        assert (await anyio.Path(tmp_path / "big").stat()).st_size == 2 * 1024 * 1024


async def test_memory_commit_mid_turn_reaches_the_next_request_once(tmp_path: Path) -> None:
    seen: list[ModelRequest] = []

    def remember(request: ModelRequest) -> ModelResponse:
        seen.append(request)
        return _bash(
            "cd \"$MEMORY_DIR\" && printf '%s\\n' '- always end answers with ✔' >> persona.md && git commit -qam rule"
        )

    def reply(request: ModelRequest) -> ModelResponse:
        seen.append(request)
        return ModelResponse(Message("assistant", "ok"))

    model = ScriptedModel(script=[remember, reply, reply])
    async with ChatSession.open(agent_id="a1", model=model, workspace=tmp_path) as session:
        await session.send("remember it")
        await session.send("and now?")
    updates = [[m for m in r.messages if m.kind == "memory_update"] for r in seen]
    assert [len(u) for u in updates] == [0, 1, 1]
    assert "- always end answers with ✔" in updates[1][0].content
    assert seen[0].system == seen[1].system == seen[2].system, "the system prompt never changes mid-conversation"


async def test_agent_info_once_per_conversation(tmp_path: Path) -> None:
    async with ChatSession.open(agent_id="a1", model=ScriptedModel(), workspace=tmp_path) as session:
        for text in ("one", "two"):
            await session.send(text)
        history = await session.runtime.store.transcript(session.conversation_id)
    infos = [m for m in history if "This is an automated message providing information about you." in m.message.content]
    assert len(infos) == 1 and f"`{session.agent.memory_dir}`" in infos[0].message.content


async def _cancelled_once(session: ChatSession, text: str, ready: Callable[[], Awaitable[object]]) -> None:
    """Send ``text`` and cancel the turn once ``ready()`` returns (the turn has reached the state the
    test interrupts), not after a time a loaded machine may not have reached it in."""
    scope = anyio.CancelScope()

    async def send() -> None:
        with scope:
            await session.send(text)

    async with anyio.create_task_group() as tg:
        tg.start_soon(send)
        with anyio.fail_after(120):
            await ready()
        scope.cancel()


# its sleep is found by a fixed argument: both backends' runs on one worker, one after the other
@pytest.mark.xdist_group("sleep-30.0917")
async def test_cancelled_turn_leaves_store_consistent_and_next_turn_settles(tmp_path: Path) -> None:
    marker = "30.0917"
    model = ScriptedModel(script=[_bash(f"sleep {marker}", "slow"), ModelResponse(Message("assistant", "back"))])
    async with ChatSession.open(agent_id="a1", model=model, workspace=tmp_path) as session:
        running = partial(wait_until, lambda: bool(running_with(marker, program="sleep")), timeout=120, what="the tool's sleep")
        await _cancelled_once(session, "take your time", partial(anyio.to_thread.run_sync, running))
        store = session.runtime.store
        turns = await store.turns(session.conversation_id)
        assert turns[-1].status == "interrupted"
        outcome = await session.send("hello again")
        assert outcome.status == "end_turn" and outcome.text == "back"
        history = await store.in_context(session.conversation_id)
        settled = [m for m in history if m.message.tool_call_id == "slow"]
        assert len(settled) == 1 and "interrupted" in settled[0].message.content
    status = await anyio.run_process(["git", "-C", str(session.agent.memory_dir), "status", "--porcelain"])
    assert status.stdout == b""


async def test_a_turns_messages_and_events_are_durable_in_order_after_it(tmp_path: Path) -> None:
    """What a plain turn wrote, read back by another connection once it returns (three jobs of the
    store's own: the opening, the reply, the close; the observer saw the same events, in order)."""
    from orchestrator.store import Store

    seen: list[str] = []

    async def observe(event: object) -> None:
        seen.append(getattr(event, "kind", ""))

    model = ScriptedModel(
        script=[ModelResponse(Message("assistant", "one")), _bash("echo hi", "t1"), ModelResponse(Message("assistant", "two"))]
    )
    async with ChatSession.open(agent_id="a1", model=model, workspace=tmp_path, observer=observe) as session:
        first = await session.send("hello")
        second = await session.send("run it")
        store = session.runtime.store
        async with Store.opened(store.path) as other:
            messages = await other.transcript(session.conversation_id)
            events = await other.events(conversation_id=session.conversation_id)
            turns = await other.turns(session.conversation_id)
    assert [(m.message.role, m.message.kind) for m in messages] == [
        ("user", "reminder"),
        ("user", "message"),
        ("assistant", "message"),
        ("user", "message"),
        ("assistant", "message"),
        ("tool", "message"),
        ("assistant", "message"),
    ]
    assert [m.turn_id for m in messages] == [first.turn_id] * 3 + [second.turn_id] * 4
    assert [(t.id, t.status) for t in turns] == [(first.turn_id, "end_turn"), (second.turn_id, "end_turn")]
    kinds = [e.kind for e in events]
    assert kinds == [
        "turn.start", "model.call", "turn.end",
        "turn.start", "model.call", "tool.start", "tool.end", "model.call", "turn.end",
    ]
    assert [e.id for e in events] == sorted(e.id for e in events)
    assert [k for k in seen if k in set(kinds)] == kinds


async def test_a_turn_cancelled_in_the_model_call_leaves_no_half_written_row(tmp_path: Path) -> None:
    """Cancelled while the model thinks: the user's message is durable (it was before the request),
    no reply row exists, the turn is ``interrupted`` with its events closed, and the next turn reads
    the store afresh and answers normally."""
    from orchestrator.store import Store

    asked = anyio.Event()

    async def thinking(_request: ModelRequest) -> ModelResponse:
        asked.set()
        await anyio.sleep(30)  # a model slower than the user's patience: what is cancelled
        return ModelResponse(Message("assistant", "never"))

    model = ScriptedModel(script=[thinking, ModelResponse(Message("assistant", "back"))])
    async with ChatSession.open(agent_id="a1", model=model, workspace=tmp_path) as session:
        await _cancelled_once(session, "think hard", asked.wait)
        async with Store.opened(session.runtime.store.path) as other:
            messages = await other.transcript(session.conversation_id)
            events = await other.events(conversation_id=session.conversation_id)
            turns = await other.turns(session.conversation_id)
        assert [(m.message.role, m.message.content) for m in messages][1:] == [("user", "think hard")]
        assert [t.status for t in turns] == ["interrupted"]
        assert [e.kind for e in events] == ["turn.start", "turn.end"]
        assert events[-1].payload["status"] == "interrupted"
        outcome = await session.send("hello again")
        assert (outcome.status, outcome.text) == ("end_turn", "back")
        history = await session.runtime.store.in_context(session.conversation_id)
    assert [m.message.content for m in history][-2:] == ["hello again", "back"]

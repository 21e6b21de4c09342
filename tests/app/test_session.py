"""A chat session's live state is held once (O3): what ``set_model``, ``rename`` and
``describe`` change reaches the turn runner, reflection and compaction alike, and a reflection
whose start is cancelled or fails leaves reflection usable, nothing behind, and a recorded outcome."""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable, Iterator
from pathlib import Path
from typing import Any

import anyio
import pytest

from orchestrator.app.session import ChatSession
from orchestrator.base.errors import UsageError
from orchestrator.base.events import Event
from orchestrator.compaction.tokens import (
    estimate_message,
    estimate_messages,
    system_prompt_tokens,
    tool_schema_tokens,
)
from orchestrator.models.openai_client import OpenAIModel
from orchestrator.models.scripted import ScriptedModel
from orchestrator.models.types import Message
from orchestrator.store import ReflectionRecord
from orchestrator.testing.openai_server import LoopbackOpenAI, text_reply

pytestmark = pytest.mark.anyio

FILLER = "we talked about the weather and the garden and the bicycle ride along the river " * 4


class Seen:
    def __init__(self) -> None:
        self.events: list[Event] = []

    async def __call__(self, event: Event) -> None:
        self.events.append(event)

    def kinds(self) -> list[str]:
        return [e.kind for e in self.events]


@pytest.fixture
def loopback() -> Iterator[LoopbackOpenAI]:
    with LoopbackOpenAI() as server:
        yield server


async def _git(repo: Path, *args: str) -> str:
    return (await anyio.run_process(["git", "-C", str(repo), *args])).stdout.decode()


async def test_after_set_model_the_compaction_summary_names_the_new_model(
    loopback: LoopbackOpenAI, tmp_path: Path
) -> None:
    client = OpenAIModel(base_url=loopback.base_url, model="loopback-model", max_attempts=1)
    try:
        async with ChatSession.open(
            agent_id="m1", model=client, workspace=tmp_path, cli={"context_window": 4000}
        ) as chat:
            await chat.set_model("second-model")
            store, conv = chat.runtime.store, chat.conversation_id
            pairs = [Message(role, f"note {i}: {FILLER}") for i in range(20) for role in ("user", "assistant")]
            await store.append_messages(conv, pairs)
            loopback.enqueue(text_reply("They discussed gardens."), text_reply("hi there"))
            outcome = await chat.send("hello")
            assert outcome.text == "hi there"
    finally:
        await client.aclose()
    summary, turn = loopback.chat_bodies
    assert "They discussed gardens." in json.dumps(turn), "the turn's request carries the summary"
    assert (summary["model"], turn["model"]) == ("second-model", "second-model")


async def test_rename_and_describe_reach_every_part_of_the_session(tmp_path: Path) -> None:
    async with ChatSession.open(agent_id="n1", workspace=tmp_path) as chat:
        await chat.rename("Nora")
        await chat.describe("keeps notes")
        compactor = chat.runner.compactor
        assert compactor is not None
        for part in (chat.runner, chat.reflection, compactor):
            assert part.agent.name == "Nora"  # type: ignore[attr-defined]
            assert part.agent.description == "keeps notes"  # type: ignore[attr-defined]


def _block_first_call(
    target: Any, name: str, entered: anyio.Event
) -> Callable[..., Awaitable[Any]]:
    """Make the first call of ``target.name`` wait until cancelled (the fault this test injects);
    later calls go through."""
    original = getattr(target, name)
    calls = [0]

    async def blocked(*args: Any, **kwargs: Any) -> Any:
        calls[0] += 1
        if calls[0] == 1:
            entered.set()
            await anyio.sleep_forever()
        return await original(*args, **kwargs)

    setattr(target, name, blocked)
    return original


async def test_a_cancelled_reflection_start_leaves_reflection_usable_and_no_worktree(tmp_path: Path) -> None:
    seen = Seen()
    async with ChatSession.open(agent_id="c1", workspace=tmp_path, observer=seen) as chat:
        await chat.send("my name is Ada Lovelace")
        store = chat.runtime.store
        entered = anyio.Event()
        _block_first_call(store, "save_reflection", entered)
        async with anyio.create_task_group() as tg:
            tg.start_soon(chat.reflect_now)
            await entered.wait()
            tg.cancel_scope.cancel()
        assert not chat.reflection.active
        memory = chat.agent.memory_dir
        assert (await _git(memory, "worktree", "list", "--porcelain")).count("worktree ") == 1
        records = await store.reflections("c1")
        assert [(r.status, r.error) for r in records] == [("failed", "cancelled while starting")]
        assert await chat.reflect_now() != "a reflection is already running for this agent"
        assert await chat.supervisor.drain(30)
        records = await store.reflections("c1")
        assert sorted(r.status for r in records) == ["failed", "merged"]
    assert (await _git(memory, "worktree", "list", "--porcelain")).count("worktree ") == 1


async def test_a_reflection_that_cannot_start_is_a_recorded_failure_and_a_warning(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    blocker = tmp_path / "not-a-directory"
    blocker.write_text("x", encoding="utf-8")
    monkeypatch.setenv("REVERIE_WORKTREES", str(blocker))
    seen = Seen()
    async with ChatSession.open(agent_id="w1", workspace=tmp_path, observer=seen) as chat:
        await chat.send("my name is Ada Lovelace")
        with pytest.raises(Exception) as caught:
            await chat.reflect_now()
        assert "REVERIE_WORKTREES" in str(caught.value) and "\n" not in str(caught.value)
        assert not chat.reflection.active
        records: list[ReflectionRecord] = await chat.runtime.store.reflections("w1")
        assert [r.status for r in records] == ["failed"]
        assert "REVERIE_WORKTREES" in (records[0].error or "")
        assert "reflection.failed" in seen.kinds()


async def test_before_the_first_turn_the_context_figure_is_the_first_request(tmp_path: Path) -> None:
    model = ScriptedModel()
    async with ChatSession.open(agent_id="ctx", workspace=tmp_path, model=model, cli={"reflection_trigger": "off"}) as chat:
        before = await chat.context_use()
        store = chat.runtime.store
        assert await store.get_prompt(chat.conversation_id) is None, "the figure wrote no prompt row"
        assert await store.in_context(chat.conversation_id) == []
        await chat.send("hi")
    first = next(r for r in model.requests if r.purpose == "chat")
    sent = system_prompt_tokens(first.system) + estimate_messages(first.messages) + tool_schema_tokens(first.tools)
    assert first.messages[-1].content == "hi"
    assert (before.tokens, before.source) == (sent - estimate_message(first.messages[-1]), "estimate")


async def test_compact_usage_and_cost_are_the_sessions(tmp_path: Path) -> None:
    """What a front end asks of a session (compact now, what it used, what that cost) is answered by
    the session itself: the summary's call counts as a subagent's, and cost prices the store's record."""
    async with ChatSession.open(
        agent_id="c1", workspace=tmp_path, cli={"context_window": 4000, "price_in": 1.0, "price_out": 2.0}
    ) as chat:
        await chat.runtime.store.append_messages(
            chat.conversation_id, [Message(role, f"note {i}: {FILLER}") for i in range(6) for role in ("user", "assistant")]
        )
        await chat.send("hello")
        before = await chat.usage()
        assert before.agent.calls >= 1
        result = await chat.compact(mode="all")
        assert result.status == "done" and result.trigger == "manual" and result.mode == "all"
        after = await chat.usage()
        assert after.agent == before.agent and after.subagents.calls > before.subagents.calls
        assert await chat.usage(conversation=True) == after
        total = after.total
        assert chat.cost(total) == round((total.prompt_tokens * 1.0 + total.completion_tokens * 2.0) / 1e6, 6) > 0
    async with ChatSession.open(agent_id="c1", workspace=tmp_path) as unpriced:
        assert (await unpriced.usage()).total.calls == 0
        assert unpriced.cost((await unpriced.usage(conversation=True)).total) is None


async def test_a_session_without_subagents_says_so_in_one_line(tmp_path: Path) -> None:
    """The plugins are the session's subagents: without them, compact and reflect are refused with a
    one-line error instead of reaching a subagent that is not there."""
    async with ChatSession.open(agent_id="bare", workspace=tmp_path) as chat:
        assert chat.compactor is chat.runner.compactor is not None and chat.reflection is not None
        bare = ChatSession(chat.runtime, chat.context, chat.conversation_id, chat.runner, chat.supervisor)
        with pytest.raises(UsageError, match="^compaction is not available in this session$"):
            await bare.compact()
        with pytest.raises(UsageError, match="^reflection is not available in this session$"):
            await bare.reflect_now()

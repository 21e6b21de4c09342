"""The compaction subagent wired into real turns: ChatSession/TurnRunner with the scripted model and
a small context window, the loopback OpenAI server for the summarizer's failure ladder, a long
offline session, and the ``reverie compact`` command."""

from __future__ import annotations

import subprocess
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import anyio
import pytest
import typer
from typer.testing import CliRunner

from orchestrator.app.session import ChatSession
from orchestrator.base.events import Event
from orchestrator.base.paths import worktrees_root
from orchestrator.base.subagent_events import CompactionDone, CompactionProgress
from orchestrator.cli.compact import register
from orchestrator.compaction import EMERGENCY_SUMMARY
from orchestrator.memfs.repo import commit_memory
from orchestrator.models.openai_client import OpenAIModel
from orchestrator.models.scripted import ScriptedModel
from orchestrator.models.types import Message, ModelClient
from orchestrator.store import Store
from orchestrator.testing.openai_server import (
    LoopbackOpenAI,
    context_overflow,
    rate_limited,
    server_error,
    text_reply,
)
from subagents.compaction import CompactionSubagent

AGENT = "alice"
FILLER = "we talked about the weather and the garden and the bicycle ride along the river " * 4


class Sleeps:
    def __init__(self) -> None:
        self.delays: list[float] = []

    async def __call__(self, delay: float) -> None:
        self.delays.append(delay)


class Recorder:
    def __init__(self) -> None:
        self.events: list[Event] = []

    async def __call__(self, event: Event) -> None:
        self.events.append(event)


@asynccontextmanager
async def session(
    *,
    window: int = 4000,
    model: ModelClient | None = None,
    background: bool = True,
    sleep: Sleeps | None = None,
    **cli: Any,
) -> AsyncIterator[tuple[ChatSession, Recorder]]:
    recorder = Recorder()
    async with ChatSession.open(
        agent_id=AGENT,
        cli={"context_window": window, **cli},
        observer=recorder,
        model=model or ScriptedModel(),
    ) as chat:
        compactor = chat.runner.compactor
        assert isinstance(compactor, CompactionSubagent)
        if not background or sleep is not None:
            chat.runner.compactor = CompactionSubagent(
                context=chat.context,
                supervisor=chat.supervisor if background else None,
                sleep=sleep or Sleeps(),
            )
        yield chat, recorder


async def prefill(store: Store, conversation_id: str, pairs: int, text: str = FILLER) -> None:
    messages: list[Message] = []
    for i in range(pairs):
        messages.append(Message("user", f"note {i}: {text}"))
        messages.append(Message("assistant", f"reply {i}: {text}"))
    await store.append_messages(conversation_id, messages)


def compaction_branches(memory_dir: Path) -> list[str]:
    out = subprocess.run(
        ["git", "-C", str(memory_dir), "branch", "--list", "reverie/compaction/*"],
        capture_output=True,
        text=True,
        check=True,
    )
    return out.stdout.split()


async def no_worktrees_left(memory_dir: Path) -> None:
    root = worktrees_root() / AGENT
    leftovers = [p.name for p in root.iterdir()] if await anyio.Path(root).exists() else []
    assert [n for n in leftovers if n.startswith("compaction-")] == []
    assert await anyio.to_thread.run_sync(compaction_branches, memory_dir) == []


@pytest.mark.anyio
async def test_turn_compacts_in_the_request_and_completes() -> None:
    async with session(background=False) as (chat, recorder):
        store, conv = chat.runner.store, chat.conversation_id
        first = await chat.send("remember: always end answers with 🦉")
        assert first.status == "end_turn" and "bash" in first.tool_calls
        assert any(m.message.kind == "memory_update" for m in await store.in_context(conv))
        await store.mark_sent(conv, "agent-info")
        outcomes = [await chat.send(f"turn {i}: {FILLER}") for i in range(12)]
        assert all(o.status == "end_turn" for o in outcomes)
        assert all(o.text.endswith("🦉") for o in outcomes)

        done = await store.events(conversation_id=conv, kinds=["compaction.done"])
        assert done, "a compaction ran"
        assert done[0].agent_id == AGENT and done[0].conversation_id == conv
        assert done[0].payload["evicted"] > 0
        assert done[0].payload["tokens_after"] < done[0].payload["tokens_before"]
        assert any(isinstance(e, CompactionProgress) for e in recorder.events)
        assert any(isinstance(e, CompactionDone) for e in recorder.events)
        assert await store.events(conversation_id=conv, kinds=["compaction.start"])

        context = await store.in_context(conv)
        assert context[0].message.kind == "summary"
        assert context[0].message.content.startswith("Note: ")
        assert context[0].metadata["compaction"]["stats"]["trigger"] == "context_window_limit"
        assert not any(m.message.kind == "memory_update" for m in context)
        transcript = await store.transcript(conv)
        texts = [m.message.content for m in transcript]
        assert "remember: always end answers with 🦉" in texts
        assert all(any(t.startswith(f"turn {i}:") for t in texts) for i in range(12))
        assert context[1].id != transcript[0].id
        row = await store.get_prompt(conv)
        assert row is not None and "always end answers with 🦉" in row.content
        assert row.memfs_revision == row.compiled_revision
        assert await store.turns(conv)
        await no_worktrees_left(chat.agent.memory_dir)


@pytest.mark.anyio
async def test_compaction_rearms_agent_info_and_folds_memory_commits() -> None:
    async with session(background=False) as (chat, _):
        store, conv = chat.runner.store, chat.conversation_id
        await chat.send("hello")
        assert await store.was_sent(conv, "agent-info")
        path = chat.agent.memory_dir / "human.md"
        await anyio.Path(path).write_text(
            "---\nname: human\ndescription: What I know about the user.\n---\n- The user keeps bees named Ottoline.\n"
        )
        await anyio.to_thread.run_sync(commit_memory, chat.agent.memory_dir, "feat: bees")
        await prefill(store, conv, 20)
        outcome = await chat.send("and now?")
        assert outcome.status == "end_turn"
        assert (await store.in_context(conv))[0].message.kind == "summary"
        assert not await store.was_sent(conv, "agent-info"), "compaction re-armed agent-info"
        row = await store.get_prompt(conv)
        assert row is not None and "Ottoline" in row.content
        assert not any(m.message.kind == "memory_update" for m in await store.in_context(conv))
        await chat.send("one more")
        reminders = [m for m in await store.in_context(conv) if m.message.kind == "reminder"]
        assert any(AGENT in m.message.content for m in reminders)


@pytest.mark.anyio
async def test_background_preparation_is_applied_at_the_trigger() -> None:
    async with session() as (chat, _):
        store, conv = chat.runner.store, chat.conversation_id
        compactor = chat.runner.compactor
        assert isinstance(compactor, CompactionSubagent)
        system, turn = "sys", await store.begin_turn(conv)
        text = "x" * 396
        await prefill(store, conv, 10, text)
        assert not await compactor.before_request(conv, system, turn)
        assert await compactor.wait_prepared(conv), "past the soft threshold a summary is prepared"
        late = await store.append_messages(
            conv,
            [Message("user", "late question " + text), Message("assistant", "late answer " + text)] * 2
            + [Message("user", "last question " + text)],
        )
        assert await compactor.before_request(conv, system, turn)
        done = await store.events(conversation_id=conv, kinds=["compaction.done"])
        assert len(done) == 1 and done[0].payload["stats"]["background"] is True
        starts = await store.events(conversation_id=conv, kinds=["compaction.start"])
        assert [s.payload["background"] for s in starts] == [True]
        ids = [m.id for m in await store.in_context(conv)]
        assert ids[-len(late) :] == [m.id for m in late], "messages appended after planning are kept"
        await no_worktrees_left(chat.agent.memory_dir)


@pytest.mark.anyio
async def test_stale_preparation_is_not_applied() -> None:
    async with session() as (chat, _):
        store, conv = chat.runner.store, chat.conversation_id
        compactor = chat.runner.compactor
        assert isinstance(compactor, CompactionSubagent)
        turn = await store.begin_turn(conv)
        await prefill(store, conv, 10, "x" * 396)
        await compactor.before_request(conv, "sys", turn)
        assert await compactor.wait_prepared(conv)
        await compactor.compact_now(conv, system="sys")
        await prefill(store, conv, 12, "y" * 396)
        assert await compactor.before_request(conv, "sys", turn)
        done = await store.events(conversation_id=conv, kinds=["compaction.done"])
        assert [d.payload["stats"]["background"] for d in done] == [False, False]


@pytest.mark.anyio
async def test_background_preparation_runs_under_its_time_limit_so_the_exit_countdown_shows_it() -> None:
    """docs/design.md L2: leaving waits for a subagent at most its time limit and shows it; the
    compaction's preparation is given its ``[limits] compaction_seconds`` as reflection is."""
    async with session(limit_compaction_seconds=45) as (chat, _):
        store, conv = chat.runner.store, chat.conversation_id
        compactor = chat.runner.compactor
        assert isinstance(compactor, CompactionSubagent)
        seen: list[list[Any]] = []
        real_prepare = compactor._prepare

        async def prepare(*args: Any) -> None:
            seen.append(chat.supervisor.still_running())
            await real_prepare(*args)

        compactor._prepare = prepare  # type: ignore[method-assign]
        turn = await store.begin_turn(conv)
        await prefill(store, conv, 10, "x" * 396)
        await compactor.before_request(conv, "sys", turn)
        assert await compactor.wait_prepared(conv)
        [running] = seen[0]
        assert running.name.startswith("compaction-prepare-")
        assert running.seconds_left is not None and 0 < running.seconds_left <= 45


# -- the summarizer over HTTP ---------------------------------------------------------------------


@pytest.fixture
def loopback() -> Iterator[LoopbackOpenAI]:
    with LoopbackOpenAI() as server:
        yield server


def _summary_bodies(server: LoopbackOpenAI) -> list[Any]:
    """Summarizer requests are the ones offering no tools."""
    return [b for b in server.chat_bodies if not b.get("tools")]


@asynccontextmanager
async def http_session(
    server: LoopbackOpenAI, *, attempts: int = 2, **cli: Any
) -> AsyncIterator[tuple[ChatSession, Sleeps]]:
    sleeps = Sleeps()
    client = OpenAIModel(
        base_url=server.base_url, model="loopback-model", sleep=sleeps, max_attempts=attempts
    )
    try:
        async with session(model=client, background=False, sleep=sleeps, **cli) as (chat, _):
            yield chat, sleeps
    finally:
        await client.aclose()


@pytest.mark.anyio
async def test_summarizer_rate_limited_then_succeeds(loopback: LoopbackOpenAI) -> None:
    async with http_session(loopback) as (chat, sleeps):
        store, conv = chat.runner.store, chat.conversation_id
        await prefill(store, conv, 20)
        loopback.enqueue(
            rate_limited(retry_after=3), text_reply("They discussed gardens."), text_reply("hi there")
        )
        outcome = await chat.send("hello")
        assert outcome.status == "end_turn" and outcome.text == "hi there"
        assert sleeps.delays == [3.0]
        context = await store.in_context(conv)
        assert context[0].metadata["compaction"]["summary"] == "They discussed gardens."
        assert context[0].metadata["compaction"]["attempts"] == 1, "the client retried; the ladder did not"
        assert await store.events(conversation_id=conv, kinds=["compaction.done"])


@pytest.mark.anyio
async def test_summarizer_failing_uses_the_fallback_model(loopback: LoopbackOpenAI) -> None:
    async with http_session(loopback, fallback_summarizer_model="backup-model") as (chat, _):
        store, conv = chat.runner.store, chat.conversation_id
        await prefill(store, conv, 20)
        loopback.enqueue(server_error(), server_error(), text_reply("Backup summary."), text_reply("done"))
        outcome = await chat.send("hello")
        assert outcome.status == "end_turn" and outcome.text == "done"
        summaries = _summary_bodies(loopback)
        assert [b["model"] for b in summaries] == ["scripted", "scripted", "backup-model"]
        context = await store.in_context(conv)
        assert context[0].metadata["compaction"]["model"] == "backup-model"
        assert "Backup summary." in context[0].message.content


@pytest.mark.anyio
async def test_every_summarizer_failing_evicts_and_the_turn_goes_on(loopback: LoopbackOpenAI) -> None:
    async with http_session(loopback, fallback_summarizer_model="backup-model") as (chat, _):
        store, conv = chat.runner.store, chat.conversation_id
        await prefill(store, conv, 20)
        before = len(await store.in_context(conv))
        loopback.enqueue(*[server_error()] * 4, text_reply("still here"))
        outcome = await chat.send("hello")
        assert outcome.status == "end_turn" and outcome.text == "still here"
        context = await store.in_context(conv)
        assert context[0].message.content.endswith(EMERGENCY_SUMMARY)
        assert len(context) < before
        failed = await store.events(conversation_id=conv, kinds=["compaction.failed"])
        assert len(failed) == 1 and failed[0].payload["evicted"] > 0
        assert not await store.events(conversation_id=conv, kinds=["compaction.done"])
        assert len(await store.transcript(conv)) > before


@pytest.mark.anyio
async def test_context_overflow_from_the_chat_model_shrinks_and_completes(loopback: LoopbackOpenAI) -> None:
    async with http_session(loopback, attempts=1) as (chat, _):
        store, conv = chat.runner.store, chat.conversation_id
        await prefill(store, conv, 4)
        before = {m.id for m in await store.in_context(conv)}
        loopback.enqueue(context_overflow(), text_reply("Short summary."), text_reply("answered"))
        outcome = await chat.send("hello")
        assert outcome.status == "end_turn" and outcome.text == "answered"
        context = await store.in_context(conv)
        assert context[0].message.kind == "summary"
        assert len(before & {m.id for m in context}) < len(before), "older messages were evicted"
        assert context[0].metadata["compaction"]["stats"]["trigger"] == "context_window_overflow"
        await no_worktrees_left(chat.agent.memory_dir)


# -- a long offline session (S25: in-process) ----------------------------------------------


@pytest.mark.anyio
async def test_two_hundred_turns_never_fail_and_the_past_stays_searchable() -> None:
    async with session(window=5000) as (chat, _):
        store, conv = chat.runner.store, chat.conversation_id
        first = await chat.send("My favourite teapot is the periwinkle one from Lisbon.")
        assert first.status == "end_turn"
        for i in range(198):
            outcome = await chat.send(f"turn {i}: {FILLER[: 80 + (i % 7) * 40]}")
            assert outcome.status == "end_turn", (i, outcome.error)
        await chat.supervisor.drain(10)
        done = await store.events(conversation_id=conv, kinds=["compaction.done"])
        assert len(done) >= 3, "several compactions over the session"
        assert not await store.events(conversation_id=conv, kinds=["compaction.failed"])
        assert first.turn_id not in {m.turn_id for m in await store.in_context(conv)}
        answer = await chat.send("what did I say about the teapot?")
        assert answer.status == "end_turn"
        assert "conversation_search" in answer.tool_calls
        assert "periwinkle" in answer.text
        assert len(await store.transcript(conv)) > 400
        await no_worktrees_left(chat.agent.memory_dir)


# -- reverie compact ------------------------------------------------------------------------------


def _app() -> typer.Typer:
    app = typer.Typer()

    @app.callback()
    def root() -> None:
        """Test app."""

    register(app)
    return app


def test_compact_command_prints_what_it_evicted() -> None:
    async def setup() -> str:
        async with session() as (chat, _):
            await prefill(chat.runner.store, chat.conversation_id, 6)
            return chat.conversation_id

    conv = anyio.run(setup, backend="trio")
    result = CliRunner().invoke(
        _app(), ["compact", "--agent", AGENT, "--conversation", conv, "--mode", "all"]
    )
    assert result.exit_code == 0, result.output
    line = result.output.strip().splitlines()[-1]
    assert line.startswith("↻ compacted ") and " messages (" in line and line.endswith(" tokens)")

    async def check() -> list[str]:
        async with Store.opened() as store:
            return [m.message.kind for m in await store.in_context(conv)]

    assert anyio.run(check, backend="trio")[0] == "summary"
    again = CliRunner().invoke(_app(), ["compact", "--agent", AGENT, "--conversation", conv, "--mode", "all"])
    assert again.exit_code == 0 and "nothing to compact" in again.output


def test_compact_command_rejects_a_bad_mode() -> None:
    result = CliRunner().invoke(_app(), ["compact", "--mode", "half"])
    assert result.exit_code != 0


@pytest.mark.anyio
async def test_a_summariser_over_its_limit_is_not_asked_and_eviction_keeps_the_turn_going() -> None:
    async with session(background=False, limit_compaction_tokens=300) as (chat, recorder):
        store, conv = chat.runner.store, chat.conversation_id
        await prefill(store, conv, 20)
        before = len(await store.in_context(conv))
        outcome = await chat.send("hello")
        assert outcome.status == "end_turn"
        context = await store.in_context(conv)
        assert context[0].message.content.endswith(EMERGENCY_SUMMARY) and len(context) < before
        calls = await store.events(conversation_id=conv, kinds=["model.call"])
        assert [c.payload["purpose"] for c in calls] == ["chat"], "no summary request was sent"
        hits = await store.events(conversation_id=conv, kinds=["limit.reached"])
        assert [(h.payload["limit"], h.payload["subject"]) for h in hits] == [("compaction.tokens", "compaction")]

"""Slash commands against a real session (scripted model or the loopback server, real git and
SQLite): each answers locally, and what they change is what the next turn uses."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import ClassVar

import anyio
import pytest

from orchestrator.app.session import ChatSession
from orchestrator.base.events import Event
from orchestrator.base.subagent_events import ReflectionBypassed
from orchestrator.cli.chat_slash import COMMANDS, Slash, _memory_report, is_slash
from orchestrator.cli.render import TerminalRenderer, tool_line
from orchestrator.testing.openai_server import LoopbackOpenAI
from tests.memfs.reflection_helpers import make_repo
from tests.memfs.tree_bombs import plant

pytestmark = pytest.mark.anyio


@dataclass(frozen=True)
class Failed(Event):
    kind: ClassVar[str] = "reflection.failed"
    reflection_id: str
    error: str


async def _said(session: ChatSession, *lines: str) -> list[str]:
    said: list[str] = []
    slash = Slash(session, said.append)
    for line in lines:
        assert await slash.run(line) is False
    return said


def test_what_counts_as_a_command() -> None:
    assert is_slash("/help") and is_slash("  /status ") and is_slash("/model gpt-x")
    assert not is_slash("//not a command") and not is_slash("/etc/hosts is odd") and not is_slash("hi /help")


async def test_every_command_answers_without_the_model(tmp_path: Path) -> None:
    async with ChatSession.open(agent_id="slash", workspace=tmp_path) as session:
        await session.send("I like green tea")
        model = session.runtime.model
        chat_requests = [r for r in model.requests if r.purpose == "chat"]  # type: ignore[attr-defined]
        said = await _said(
            session,
            "/help", "/status", "/memory", "/reflections", "/conversations", "/model", "/compact", "/stat",
        )  # fmt: skip
        # only /compact asks the model, and for a summary, never a chat answer
        assert [r for r in model.requests if r.purpose == "chat"] == chat_requests  # type: ignore[attr-defined]
        help_text, status, memory, reflections, conversations, shown_model, compact, bogus = said
        assert all(c.usage in help_text for c in COMMANDS)
        assert f"conversation  {session.conversation_id}" in status and "/ 128000 tokens" in status
        assert "memory HEAD" in status and "kept branches none" in status
        assert "human.md" in memory or "persona.md" in memory
        assert "last commits:" in memory
        assert reflections.startswith("no reflections yet")
        assert f"* {session.conversation_id[:8]}" in conversations and "messages" in conversations
        assert shown_model.startswith("model scripted (embedded)")
        assert "compact" in compact
        assert bogus == "unknown command /stat; did you mean /status? /help lists the commands"
        assert await Slash(session, said.append).run("/exit") is True


async def test_new_and_switching_conversations(tmp_path: Path) -> None:
    async with ChatSession.open(agent_id="slash", workspace=tmp_path) as session:
        first = session.conversation_id
        await session.send("one")
        (said,) = await _said(session, "/new")
        second = session.conversation_id
        assert second != first and said == f"new conversation {second}"
        outcome = await session.send("two")
        assert outcome.conversation_id == second
        (listed,) = await _said(session, "/conversations")
        assert "one" in listed and "* " + second[:8] in listed, "the first user message tells them apart"
        await _said(session, f"/conversations {first[:8]}")
        assert (await session.send("three")).conversation_id == first
        turns = {c: len(await session.runtime.store.turns(c)) for c in (first, second)}
        assert turns == {first: 2, second: 1}


async def test_rename_is_true_for_the_store_and_the_next_conversation(tmp_path: Path) -> None:
    async with ChatSession.open(agent_id="slash", workspace=tmp_path) as session:
        await session.send("hello")
        await _said(session, "/rename Owl   Keeper", "/new")
        assert (await session.runtime.store.get_agent("slash")).name == "Owl Keeper"  # type: ignore[union-attr]
        await session.send("hello again")
        reminders = [
            m.message.content
            for m in await session.runtime.store.transcript(session.conversation_id)
            if m.message.kind == "reminder"
        ]
        assert any("**Agent name**: Owl Keeper (the user can change this with /rename)" in r for r in reminders)


def test_every_command_the_agent_info_reminder_names_exists() -> None:
    import re

    from orchestrator.agent.reminders import AGENT_INFO_TEMPLATE

    named = set(re.findall(r"change this with /(\w+)", AGENT_INFO_TEMPLATE))
    assert named >= {"rename", "description"}
    assert named <= {c.name for c in COMMANDS}


async def test_description_reaches_the_next_conversation(tmp_path: Path) -> None:
    async with ChatSession.open(agent_id="slash", workspace=tmp_path) as session:
        await _said(session, "/description keeps notes on owls", "/new")
        await session.send("hello")
        reminders = [m.message.content for m in await session.runtime.store.transcript(session.conversation_id)]
        assert any("**Agent description**: keeps notes on owls (the user" in r for r in reminders)
    async with ChatSession.open(agent_id="slash", workspace=tmp_path) as again:
        assert again.agent.description == "keeps notes on owls"


async def test_model_switches_the_next_request(tmp_path: Path) -> None:
    server = await anyio.to_thread.run_sync(LoopbackOpenAI().start)
    try:
        cli = {"base_url": server.base_url, "api_key": "sk-test", "model": "first-model"}
        async with ChatSession.open(agent_id="slash", workspace=tmp_path, cli=cli) as session:
            await session.send("hi")
            (said,) = await _said(session, "/model second-model")
            assert said.startswith("model second-model from the next request on")
            await session.send("hi again")
            assert [b["model"] for b in server.chat_bodies] == ["first-model", "second-model"]
            record = await session.runtime.store.get_agent("slash")
            assert record is not None and record.settings["model"] == "second-model"
    finally:
        await anyio.to_thread.run_sync(server.stop)


async def test_reflection_outcomes_are_shown(tmp_path: Path) -> None:
    """Outcome events are rendered by kind, so a failure is never silent."""
    lines: list[str] = []
    renderer = TerminalRenderer(above=lambda text: lines.append(text) is None)
    await renderer(Failed("r1", "model error: HTTP 500\nmore"))
    await renderer(ReflectionBypassed("r2", "reverie/reflection/r2", ("a" * 40, "b" * 40)))
    assert lines == [
        "  ⚠ reflection failed: model error: HTTP 500 more",
        "  ⚠ memory: 2 commits made by a git outside reverie while a reflection merged (no lock, no hook): "
        "aaaaaaa bbbbbbb; folded in, nothing lost",
    ]


def test_tool_calls_are_one_line() -> None:
    assert tool_line("bash", '{"command": "git commit -m \\"feat: update persona\\""}') == (
        '⚙ bash  git commit -m "feat: update persona"'
    )
    assert tool_line("read_file", '{"path": "persona.md", "offset": 3}') == "⚙ read_file  persona.md  (+offset)"
    assert tool_line("bash", '{"command": "ls"}', verbose=True) == '⚙ bash  {"command":"ls"}'
    assert tool_line("bash", "{not json") == "⚙ bash  {not json"


def _seen() -> tuple[list[str], TerminalRenderer]:
    """What a REPL shows: the commands' lines and the renderer's notices, in one list."""
    lines: list[str] = []
    return lines, TerminalRenderer(above=lambda text: lines.append(text) is None)


async def test_cost_counts_this_session_and_this_conversation_main_agent_and_subagents_apart(tmp_path: Path) -> None:
    async with ChatSession.open(agent_id="slash", workspace=tmp_path) as earlier:
        await earlier.send("said before this session")
        conversation = earlier.conversation_id
    prices = {"price_in": 3.0, "price_out": 15.0}
    async with ChatSession.open(agent_id="slash", workspace=tmp_path, conversation_id=conversation, cli=prices) as session:
        store = session.runtime.store
        since = await store.last_event_id()
        lines: list[str] = []
        slash = Slash(session, lines.append, since=since)
        await session.send("hello")
        await slash.run("/reflect")
        await session.supervisor.drain(30)
        await slash.run("/cost")
        calls = await store.events(kinds=["model.call"])
    table = lines[-1].splitlines()
    assert table[0].split() == ["calls", "tokens", "in", "tokens", "out", "cost"]

    def row(title: str, label: str) -> list[str]:
        start = table.index(title)
        return next(line.split() for line in table[start + 1 : start + 4] if line.split()[0] == label.split()[0])

    def expected(selected: list[object]) -> list[str]:
        tin = sum(c.payload["prompt_tokens"] for c in selected)  # type: ignore[attr-defined]
        tout = sum(c.payload["completion_tokens"] for c in selected)  # type: ignore[attr-defined]
        return [f"{len(selected):,}", f"{tin:,}", f"{tout:,}", f"${(tin * 3.0 + tout * 15.0) / 1e6:.4f}"]

    new = [c for c in calls if c.id > since]
    main_new = [c for c in new if c.payload["purpose"] == "chat"]
    sub_new = [c for c in new if c.payload["purpose"] != "chat"]
    assert main_new and sub_new, "the session made chat calls and a reflection's calls"
    assert row("this session", "main agent")[2:] == expected(main_new)
    assert row("this session", "subagents")[1:] == expected(sub_new)
    assert row("this conversation", "main agent")[2:] == expected([c for c in calls if c.payload["purpose"] == "chat"])
    assert row("this conversation", "total")[1:] == expected(calls)


async def test_cost_without_prices_shows_tokens_and_how_to_price(tmp_path: Path) -> None:
    async with ChatSession.open(agent_id="slash", workspace=tmp_path) as session:
        await session.send("hello")
        (table,) = await _said(session, "/cost")
    assert "$" not in table and table.splitlines()[-1].startswith("no prices configured: set [model] price_in")


async def test_reflect_ends_with_a_line_naming_its_outcome(tmp_path: Path) -> None:
    lines, renderer = _seen()
    async with ChatSession.open(agent_id="slash", workspace=tmp_path, observer=renderer) as session:
        await session.send("hello")
        slash = Slash(session, lines.append)
        await slash.run("/reflect")
        await session.supervisor.drain(30)
        await slash.run("/reflect")
    assert lines[0] == "reflection started; a line with its outcome follows when it finishes"
    assert lines[1] == "  ↻ reflection: no changes to memory"
    assert lines[2].startswith("reflection not started: ")


async def test_compact_prints_once_and_never_grows_the_context(tmp_path: Path) -> None:
    lines, renderer = _seen()
    async with ChatSession.open(agent_id="slash", workspace=tmp_path, observer=renderer) as session:
        slash = Slash(session, lines.append)
        await session.send("hi")
        before = await session.context_use()
        await slash.run("/compact")
        assert lines[-1].startswith("nothing to compact: the summary (") and "is not smaller than the messages" in lines[-1]
        assert (await session.context_use()).tokens == before.tokens
        for number in range(20):
            await session.send(f"message {number}: " + "words " * 60)
        before = await session.context_use()
        lines.clear()
        await slash.run("/compact")
        after = await session.context_use()
    assert len(lines) == 1 and lines[0].startswith("↻ compacted "), lines
    assert after.tokens < before.tokens


def test_memory_report_names_a_head_over_a_tree_cap_in_one_line(tmp_path: Path) -> None:
    repo = make_repo(tmp_path / "memory")
    plant(repo, fanout=10, levels=7)
    lines = _memory_report(repo)
    assert len(lines) == 1 and "(MAX_TREE_PATHS)" in lines[0] and "\n" not in lines[0]


async def test_memory_log_names_the_writer_and_undo_asks_before_taking_a_change_back(tmp_path: Path) -> None:
    async with ChatSession.open(agent_id="undo", workspace=tmp_path, cli={"reflection_trigger": "off"}) as session:
        await session.send("设定：回答末尾总是加上 🦉")
        head = await session.memory_head()
        log, shown = await _said(session, "/memory log", "/undo")
        assert log.splitlines()[1].split()[2:4] == ["agent", head[:7]]
        assert "conversation " + session.conversation_id in log
        assert shown.startswith(f"last change: {head[:7]} agent  feat: update persona") and "🦉" in shown
        assert shown.splitlines()[-1] == f"take it back with /undo {head[:7]}"
        assert await session.memory_head() == head, "showing it changes nothing"
        (undone,) = await _said(session, f"/undo {head[:7]}")
        new_head = await session.memory_head()
        assert undone.startswith(f"undone: new commit {new_head[:7]}")
        assert "🦉" not in await anyio.Path(session.agent.memory_dir / "persona.md").read_text()
        await session.send("你好")
        last = [r for r in session.runtime.model.requests if r.purpose == "chat"][-1]  # type: ignore[attr-defined]
        assert any("<memory_update" in m.content and new_head[:7] in m.content for m in last.messages)
        (bad,) = await _said(session, "/undo not-a-commit")
        assert bad == f"undo: 'not-a-commit' names no commit in {session.agent.memory_dir}"

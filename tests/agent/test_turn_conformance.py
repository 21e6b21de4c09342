"""Spec-conformance cases for the turn loop (TURN-1.2, TURN-2.6, TURN-3.4, TURN-4.7) found in review."""

from __future__ import annotations

import subprocess
from collections.abc import AsyncIterator, Sequence
from datetime import UTC, datetime
from functools import partial
from pathlib import Path
from typing import Any

import anyio
import pytest

from orchestrator.agent import memory_sync
from orchestrator.agent.context import AgentProfile, SessionContext
from orchestrator.agent.prompt_cache import record_from, resolve_system_prompt, same_memory
from orchestrator.agent.turn import TurnRunner
from orchestrator.app.session import ChatSession
from orchestrator.base.config import Settings
from orchestrator.base.events import Event, MemoryUpdateInjected
from orchestrator.memfs.compiler import compile_system_prompt
from orchestrator.memfs.repo import init_memory_repo
from orchestrator.models.scripted import ScriptedModel
from orchestrator.models.types import Message, ModelError, ModelRequest, ModelResponse, ToolCall
from orchestrator.store import Store, StoredMessage
from tests.support import hold_merge_lock

pytestmark = pytest.mark.anyio

FRONT = "---\nname: {name}\ndescription: d\n---\n"
V1_FRONT = "---\ndescription: d\n---\n"
"""Legacy (v1) frontmatter allows no ``name`` key; a tree with one fails the audit before the model."""


def _git(repo: Path, *args: str) -> str:
    done = subprocess.run(["git", *args], cwd=repo, check=True, capture_output=True, text=True)
    return done.stdout.strip()


def _commit(repo: Path, files: dict[str, str], message: str = "change") -> str:
    for rel, text in files.items():
        (repo / rel).parent.mkdir(parents=True, exist_ok=True)
        (repo / rel).write_text(text, encoding="utf-8")
    _git(repo, "add", "-A")
    _git(repo, "commit", "--no-verify", "-qm", message)
    return _git(repo, "rev-parse", "HEAD")


def _v1_repo(repo: Path) -> str:
    repo.mkdir(parents=True)
    _git(repo, "init", "-q", "-b", "main")
    return _commit(repo, {"system/persona.md": V1_FRONT + "I am careful.\n"}, "init")


async def commit(repo: Path, files: dict[str, str], message: str = "change") -> str:
    return await anyio.to_thread.run_sync(partial(_commit, repo, files, message))


@pytest.fixture
async def store(tmp_path: Path) -> AsyncIterator[Store]:
    async with Store.opened(tmp_path / "store.sqlite") as opened:
        await opened.ensure_agent("a1")
        yield opened


def _updates(history: Sequence[StoredMessage]) -> list[StoredMessage]:
    return [m for m in history if m.message.kind == "memory_update"]


# -- TURN-2.6 row 4 with a v1 repository---------------------------------------------------------------


async def test_v1_commit_outside_core_memory_adds_no_update(store: Store, tmp_path: Path) -> None:
    """v1 core memory ends with a time-stamped <memory_metadata>; it must not make every commit an update."""
    repo = tmp_path / "memory"
    first = await anyio.to_thread.run_sync(_v1_repo, repo)
    conv = (await store.create_conversation("a1")).id
    earlier = await anyio.to_thread.run_sync(
        partial(compile_system_prompt, repo, "sys", agent_id="a1", conversation_id=conv, now=datetime(2020, 1, 1, tzinfo=UTC))
    )
    assert earlier.memfs_revision == first and "<memory_metadata>" in earlier.core_memory
    await store.set_prompt(record_from(earlier, conversation_id=conv, agent_id="a1"))
    await store.mark_prompt_sent(conv)

    second = await commit(repo, {"notes.txt": "not memory\n"})
    resolved = await resolve_system_prompt(store, conversation_id=conv, agent_id="a1", memory_dir=repo, raw_system="sys")
    assert resolved.update_message_id is None and resolved.content == earlier.content
    row = await store.get_prompt(conv)
    assert row is not None and row.memfs_revision == second and row.core_memory == earlier.core_memory
    assert _updates(await store.in_context(conv)) == []

    third = await commit(repo, {"system/persona.md": V1_FRONT + "I am bold.\n"})
    resolved = await resolve_system_prompt(store, conversation_id=conv, agent_id="a1", memory_dir=repo, raw_system="sys")
    updates = _updates(await store.in_context(conv))
    assert len(updates) == 1 and resolved.update_message_id == updates[0].id
    assert f"committed at revision {third}.\n" in updates[0].message.content
    assert "I am bold." in updates[0].message.content
    assert updates[0].metadata == {"memfs_revision": third, "previous_memfs_revision": second}


def test_same_memory_ignores_only_the_v1_metadata_block() -> None:
    meta = "<memory_metadata>\n- AGENT_ID: a\n- CONVERSATION_ID: c\n- System prompt last recompiled: {t}\n</memory_metadata>"
    assert same_memory("mem\n\n" + meta.format(t="1"), "mem\n\n" + meta.format(t="2"))
    assert same_memory(meta.format(t="1"), meta.format(t="2"))
    assert not same_memory("mem\n\n" + meta.format(t="1"), "other\n\n" + meta.format(t="1"))
    assert not same_memory("<memory>a</memory>", "<memory>b</memory>")


# -- 2.6 rule 3 with rule 4's writing order --------------------------------------------------------


class _CrashingStore(Store):
    """Fails the next message append, like a process dying at that point."""

    crash_next_append = False

    async def append_messages(self, *args: Any, **kwargs: Any) -> list[StoredMessage]:
        if self.crash_next_append:
            self.crash_next_append = False
            raise RuntimeError("simulated crash")
        return await super().append_messages(*args, **kwargs)


async def test_stale_update_refresh_survives_a_crash_between_row_and_message(tmp_path: Path) -> None:
    repo = tmp_path / "memory"
    await anyio.to_thread.run_sync(init_memory_repo, repo)
    async with _CrashingStore.opened(tmp_path / "store.sqlite") as store:
        assert isinstance(store, _CrashingStore)
        await store.ensure_agent("a1")
        conv = (await store.create_conversation("a1")).id
        resolve = partial(resolve_system_prompt, store, conversation_id=conv, agent_id="a1", memory_dir=repo)
        await resolve(raw_system="sys one")
        await store.mark_prompt_sent(conv)
        b = await commit(repo, {"persona.md": FRONT.format(name="persona") + "B\n"})
        assert (await resolve(raw_system="sys one")).update_message_id is not None
        c = await commit(repo, {"persona.md": FRONT.format(name="persona") + "C\n"})

        store.crash_next_append = True
        with pytest.raises(RuntimeError, match="simulated crash"):
            await resolve(raw_system="sys two")  # row 1: full compile at C, the update for B is stale
        resolved = await resolve(raw_system="sys two")
        updates = _updates(await store.in_context(conv))
        assert [u.metadata["memfs_revision"] for u in updates] == [b, c]
        assert resolved.update_message_id == updates[-1].id
        assert updates[-1].metadata["previous_memfs_revision"] == b


# -- 4.7 item 2: the merge lock ---------------------------------------------------------------------


async def test_post_turn_sync_skips_silently_while_a_merge_holds_the_lock(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(memory_sync, "SYNC_LOCK_WAIT_SECONDS", 0.3)  # the bound, not the behaviour
    async with ChatSession.open(agent_id="a1", model=ScriptedModel(), workspace=tmp_path) as session:
        store, conv, repo = session.runtime.store, session.conversation_id, session.agent.memory_dir
        await anyio.to_thread.run_sync(partial((repo / "persona.md").write_text, "uncommitted\n"))
        async with hold_merge_lock(repo):
            outcome = await session.send("hello")
        assert outcome.status == "end_turn" and outcome.sync is None
        assert [p.key for p in await store.pending_reminders(conv)] == []
        assert [e for e in await store.events(conversation_id=conv) if e.kind == "memory.sync_failed"] == []
        outcome = await session.send("again")
        assert outcome.sync is not None and outcome.sync.status == "dirty"
        assert [p.key for p in await store.pending_reminders(conv)] == ["memory-git-sync"]


# -- 1.2: failures, overflow, first_sent_at -----------------------------------------------------------


async def test_unexpected_failure_records_a_one_line_error_and_still_syncs(tmp_path: Path) -> None:
    def boom(request: ModelRequest) -> ModelResponse:
        raise RuntimeError("adapter bug\nwith a traceback-like tail")

    async with ChatSession.open(agent_id="a1", model=ScriptedModel(script=[boom]), workspace=tmp_path) as session:
        store, conv, repo = session.runtime.store, session.conversation_id, session.agent.memory_dir
        await anyio.to_thread.run_sync(partial((repo / "persona.md").write_text, "uncommitted\n"))
        with pytest.raises(RuntimeError):
            await session.send("hi")
        turn = (await store.turns(conv))[-1]
        assert (turn.status, turn.error) == ("error", "RuntimeError: adapter bug")
        assert [p.key for p in await store.pending_reminders(conv)] == ["memory-git-sync"]


async def test_prompt_counts_as_sent_even_when_the_request_fails(tmp_path: Path) -> None:
    def fail(request: ModelRequest) -> ModelResponse:
        raise ModelError("model error: upstream said 500", status=500)

    async with ChatSession.open(agent_id="a1", model=ScriptedModel(script=[fail]), workspace=tmp_path) as session:
        outcome = await session.send("hi")
        assert outcome.status == "error" and outcome.error == "model error: upstream said 500"
        row = await session.runtime.store.get_prompt(session.conversation_id)
        assert row is not None and row.first_sent_at is not None


class _OverflowCompactor:
    def __init__(self) -> None:
        self.overflows = 0

    async def before_request(self, conversation_id: str, system: str, turn_id: str) -> bool:
        return False

    async def on_overflow(self, conversation_id: str, system: str, turn_id: str) -> bool:
        self.overflows += 1
        return True


async def test_overflow_retries_are_counted_per_request(store: Store, tmp_path: Path) -> None:
    def overflow(request: ModelRequest) -> ModelResponse:
        raise ModelError("model error: context length exceeded", context_overflow=True)

    call = ModelResponse(Message("assistant", "", tool_calls=(ToolCall("t1", "bash", '{"command": "true"}'),)))
    script: list[Any] = [overflow, overflow, call, overflow, overflow, overflow, ModelResponse(Message("assistant", "done"))]
    repo = tmp_path / "memory"
    await anyio.to_thread.run_sync(init_memory_repo, repo)
    compactor = _OverflowCompactor()
    runner = TurnRunner(
        context=SessionContext(
            store=store,
            model=ScriptedModel(script=script, strict=True),
            settings=Settings(),
            agent=AgentProfile("a1", "a1", repo, "sys"),
        ),
        workspace=tmp_path,
        compactor=compactor,
    )
    conv = (await store.create_conversation("a1")).id
    outcome = await runner.run_turn(conv, "go")
    assert (outcome.status, outcome.text, outcome.steps) == ("end_turn", "done", 2)
    assert compactor.overflows == 5


# -- 3.4: the update event names the revision the model was told before ---------------------------------


async def test_update_event_names_the_previous_revision(tmp_path: Path) -> None:
    events: list[Event] = []

    async def observe(event: Event) -> None:
        events.append(event)

    async with ChatSession.open(agent_id="a1", model=ScriptedModel(), workspace=tmp_path, observer=observe) as session:
        await session.send("one")
        row = await session.runtime.store.get_prompt(session.conversation_id)
        assert row is not None
        new = await commit(session.agent.memory_dir, {"persona.md": FRONT.format(name="persona") + "changed\n"})
        await session.send("two")
    injected = [e for e in events if isinstance(e, MemoryUpdateInjected)]
    assert [(e.revision, e.previous_revision) for e in injected] == [(new, row.memfs_revision)]


# -- 1.2 rule 6: an after-turn hook never breaks the turn ---------------------------------------------


async def test_failing_after_turn_hook_is_recorded_not_raised(tmp_path: Path) -> None:
    async def broken(runner: TurnRunner, outcome: Any) -> None:
        raise RuntimeError("reflection trigger exploded\nsecond line")

    async with ChatSession.open(agent_id="a1", model=ScriptedModel(), workspace=tmp_path) as session:
        session.supervisor.after_turn_hooks.insert(0, broken)
        outcome = await session.send("hi")
        assert outcome.status == "end_turn"
        events = await session.runtime.store.events(conversation_id=session.conversation_id, kinds=["subagent.failed"])
        assert [e.payload["error"] for e in events] == [
            "after-turn:test_failing_after_turn_hook_is_recorded_not_raised.<locals>.broken failed: "
            "RuntimeError: reflection trigger exploded"
        ]

"""Reflection subagents end to end: real git worktrees, the scripted model, the real merge path."""

from __future__ import annotations

import io
import json
import os
from pathlib import Path
from typing import Any

import anyio
import pytest

from orchestrator.app.session import ChatSession
from orchestrator.base.events import Event
from orchestrator.models.types import ToolCall
from orchestrator.testing.openai_server import LoopbackOpenAI, Planned, text_reply, tool_call_reply

pytestmark = pytest.mark.anyio


async def _git(repo: Path, *args: str) -> str:
    result = await anyio.run_process(["git", "-C", str(repo), *args])
    return result.stdout.decode()


class Seen:
    def __init__(self) -> None:
        self.events: list[Event] = []

    async def __call__(self, event: Event) -> None:
        self.events.append(event)

    def kinds(self) -> list[str]:
        return [e.kind for e in self.events]


STEP3 = {"reflection_trigger": "step-count", "reflection_step_count": 3}


async def test_step_count_fires_after_three_steps_and_merge_reaches_main_agent(tmp_path: Path) -> None:
    seen = Seen()
    async with ChatSession.open(agent_id="r1", workspace=tmp_path, cli=STEP3, observer=seen) as session:
        await session.send("my name is Ada Lovelace")
        await session.send("what a nice day")
        assert "reflection.launch" not in seen.kinds()
        await session.send("tell me something")
        assert seen.kinds().count("reflection.launch") == 1
        assert await session.supervisor.drain(30)
        assert "reflection.merged" in seen.kinds()
        memory = session.agent.memory_dir
        assert "Ada Lovelace" in (memory / "human.md").read_text(encoding="utf-8")
        assert "(reflection)" in (await _git(memory, "log", "-1", "--format=%s"))
        await session.send("hello again")
        history = await session.runtime.store.in_context(session.conversation_id)
        updates = [m for m in history if m.message.kind == "memory_update"]
        assert updates and "Ada Lovelace" in updates[-1].message.content
        records = await session.runtime.store.reflections("r1")
        assert [r.status for r in records] == ["merged"]
    worktrees = await _git(memory, "worktree", "list", "--porcelain")
    assert worktrees.count("worktree ") == 1
    assert "reverie/reflection" not in await _git(memory, "branch", "--list")


async def test_conflicting_main_edit_keeps_branch_and_reminds(tmp_path: Path) -> None:
    from orchestrator.models.scripted import ScriptedModel
    from orchestrator.models.types import Message, ModelRequest, ModelResponse

    gate = anyio.Event()

    async def respond(request: ModelRequest) -> ModelResponse:
        if request.purpose != "reflect":
            return ModelResponse(Message("assistant", "ok"))
        if any(m.role == "tool" for m in request.messages):
            return ModelResponse(Message("assistant", "Reflection: updated human.md"))
        await gate.wait()
        command = (
            "cd \"$MEMORY_DIR\" && sed -i 's/Nothing recorded yet./The user is Grace./' human.md "
            "&& git commit -qam 'feat(reflection): name 🔮'"
        )
        return ModelResponse(Message("assistant", "", tool_calls=(_bash_call(command),)))

    seen = Seen()
    model = ScriptedModel(script=[respond] * 10)
    async with ChatSession.open(agent_id="r2", workspace=tmp_path, cli=STEP3, observer=seen, model=model) as session:
        memory = session.agent.memory_dir
        for text in ("my name is Grace Hopper", "ok", "fine"):
            await session.send(text)
        assert seen.kinds().count("reflection.launch") == 1
        human = memory / "human.md"
        text = await anyio.Path(human).read_text(encoding="utf-8")
        await anyio.Path(human).write_text(text.replace("Nothing recorded yet.", "The user is Linus."), encoding="utf-8")
        await _git(memory, "commit", "-qam", "main agent edits human.md")
        gate.set()
        assert await session.supervisor.drain(30)
        records = await session.runtime.store.reflections("r2")
        assert [r.status for r in records] == ["kept_conflict"]
        kept = records[0]
        assert kept.branch in await _git(memory, "branch", "--list", kept.branch)
        for sha in kept.commits:
            await _git(memory, "cat-file", "-e", sha)
        assert "reflection.kept" in seen.kinds()
        assert "The user is Linus." in await anyio.Path(human).read_text(encoding="utf-8")
        pending = await session.runtime.store.pending_reminders(session.conversation_id)
        texts = [p.text for p in pending]
        assert any("MEMORY REFLECTION KEPT" in t and kept.branch in t and "human.md" in t for t in texts)
        await session.send("next turn")
        history = await session.runtime.store.in_context(session.conversation_id)
        assert any("MEMORY REFLECTION KEPT" in m.message.content for m in history if m.message.kind == "reminder")
    worktrees = await _git(memory, "worktree", "list", "--porcelain")
    assert worktrees.count("worktree ") == 1


def _bash_call(command: str) -> ToolCall:
    return ToolCall("c1", "bash", json.dumps({"command": command}))


async def test_cancelling_mid_reflection_leaves_no_worktree_and_a_recoverable_branch(tmp_path: Path) -> None:
    from orchestrator.models.scripted import ScriptedModel
    from orchestrator.models.types import Message, ModelRequest, ModelResponse

    committed = anyio.Event()

    async def respond(request: ModelRequest) -> ModelResponse:
        if request.purpose != "reflect":
            return ModelResponse(Message("assistant", "ok"))
        if any(m.role == "tool" for m in request.messages):
            committed.set()  # the bash call (and its commit) returned
            await anyio.sleep(60)  # a model still thinking when the session closes: what is cancelled
        command = "cd \"$MEMORY_DIR\" && printf -- '- likes tea\\n' >> human.md && git commit -qam 'feat(reflection): tea 🔮'"
        return ModelResponse(Message("assistant", "", tool_calls=(_bash_call(command),)))

    model = ScriptedModel(script=[respond] * 10)
    async with ChatSession.open(agent_id="r3", workspace=tmp_path, cli=STEP3, model=model) as session:
        memory = session.agent.memory_dir
        for text in ("a", "b", "c"):
            await session.send(text)
        with anyio.fail_after(120):
            await committed.wait()
    worktrees = await _git(memory, "worktree", "list", "--porcelain")
    assert worktrees.count("worktree ") == 1, worktrees
    branch_list = await _git(memory, "branch", "--list", "reverie/reflection/*")
    assert branch_list.strip(), "the reflection branch with its commit survives the cancellation"
    assert "tea" in await _git(memory, "log", "--format=%s", branch_list.strip().lstrip("* "))
    status = await _git(memory, "status", "--porcelain")
    assert status == ""


async def test_compaction_event_triggers_one_reflection_that_reaches_the_main_agent(tmp_path: Path) -> None:
    seen = Seen()
    settings = {"reflection_trigger": "compaction-event", "context_window": 3000}
    from orchestrator.models.scripted import ScriptedModel

    model = ScriptedModel()
    async with ChatSession.open(agent_id="r4", workspace=tmp_path, cli=settings, observer=seen, model=model) as session:
        await session.send("my name is Edsger Dijkstra " + "and I like long sentences " * 10)
        for i in range(40):
            if "compaction.done" in seen.kinds():
                break
            await session.send(f"message number {i} " + "filler words to fill the window " * 8)
        assert "compaction.done" in seen.kinds()
        assert await session.supervisor.drain(30)
        assert seen.kinds().count("reflection.launch") == 1
        assert "reflection.merged" in seen.kinds()
        before = len(model.requests)
        await session.send("and now?")
        request = [r for r in model.requests[before:] if r.purpose == "chat"][0]
        updates = [m for m in request.messages if m.kind == "memory_update"]
        # the merged fact reaches the model: as a <memory_update>, or folded into a prompt recompiled by compaction
        assert any("Edsger Dijkstra" in m.content for m in updates) or "Edsger Dijkstra" in request.system


@pytest.mark.anyio
async def test_a_resolved_conflict_counts_the_resolver_calls(tmp_path: Path) -> None:
    from orchestrator.models.scripted import ScriptedModel
    from orchestrator.models.types import Message, ModelRequest, ModelResponse

    gate = anyio.Event()
    rules = ScriptedModel()

    async def respond(request: ModelRequest) -> ModelResponse:
        if request.purpose != "reflect":
            return await rules.complete(request)
        if any(m.role == "tool" for m in request.messages):
            return ModelResponse(Message("assistant", "Reflection: updated human.md"))
        await gate.wait()
        command = (
            "cd \"$MEMORY_DIR\" && sed -i 's/Nothing recorded yet./The user is Grace./' human.md "
            "&& git commit -qam 'feat(reflection): name 🔮'"
        )
        return ModelResponse(Message("assistant", "", tool_calls=(_bash_call(command),)))

    model = ScriptedModel(script=[respond] * 40)
    async with ChatSession.open(agent_id="r9", workspace=tmp_path, cli=STEP3, model=model) as session:
        memory = session.agent.memory_dir
        for text in ("my name is Grace Hopper", "ok", "fine"):
            await session.send(text)
        human = memory / "human.md"
        text = await anyio.Path(human).read_text(encoding="utf-8")
        await anyio.Path(human).write_text(text.replace("Nothing recorded yet.", "The user is Linus."), encoding="utf-8")
        await _git(memory, "commit", "-qam", "main agent edits human.md")
        gate.set()
        assert await session.supervisor.drain(30)
        records = await session.runtime.store.reflections("r9")
        calls = await session.runtime.store.events(kinds=["model.call"])
        resolve = [c for c in calls if c.payload["purpose"] == "resolve"]
        assert [r.status for r in records] == ["resolved"], records
        assert resolve and all(c.agent_id == "r9" and c.conversation_id == session.conversation_id for c in resolve)


async def test_a_dirty_checkout_holding_reflection_back_is_said_once(tmp_path: Path) -> None:
    """A reflection due while the main checkout has uncommitted changes is held back: one warning
    the terminal prints, not one per turn nor per session, and again only once a launch has run."""
    from orchestrator.cli.render import TerminalRenderer

    seen = Seen()
    shown = io.StringIO()
    renderer = TerminalRenderer(shown)

    async def observe(event: Event) -> None:
        await seen(event)
        await renderer(event)

    every_step = {"reflection_trigger": "step-count", "reflection_step_count": 1}
    async with ChatSession.open(agent_id="h1", workspace=tmp_path, cli=every_step, observer=observe) as session:
        memory = session.agent.memory_dir
        human = anyio.Path(memory / "human.md")
        original = await human.read_text(encoding="utf-8")
        await human.write_text(original + "An edit the user has not committed.\n", encoding="utf-8")
        for text in ("one", "two", "three"):
            await session.send(text)
        held = [e for e in seen.events if e.kind == "reflection.held"]
        assert [(e.reason_code, e.paths) for e in held] == [("dirty", ("human.md",))]  # type: ignore[attr-defined]
        assert "reflection.launch" not in seen.kinds()
        lines = [line for line in shown.getvalue().splitlines() if "reflection held back" in line]
        assert lines == [
            "  ⚠ reflection held back: the memory repository has uncommitted changes (human.md); commit or discard "
            "them (`git status` in `reverie memory path`) and reflection resumes at the next turn end"
        ]
    async with ChatSession.open(agent_id="h1", workspace=tmp_path, cli=every_step, observer=seen) as session:
        await session.send("four")
        assert seen.kinds().count("reflection.held") == 1, "a new session says it no more than a new turn does"
        await _git(memory, "commit", "-qam", "the user commits their edit")
        await session.send("five")
        assert seen.kinds().count("reflection.launch") == 1
        assert await session.supervisor.drain(30)
        await human.write_text(original + "Another uncommitted edit.\n", encoding="utf-8")
        await session.send("six")
        await session.send("seven")
        assert seen.kinds().count("reflection.held") == 2, "held again after a launch: said again, once"
        assert seen.kinds().count("reflection.launch") == 1
    stored = await _stored_kinds(tmp_path, "h1")
    assert stored.count("reflection.held") == 2


async def _stored_kinds(tmp_path: Path, agent_id: str) -> list[str]:
    from orchestrator.store import Store

    async with Store.opened(Path(os.environ["REVERIE_HOME"]) / "reverie.sqlite3") as store:
        return [e.kind for e in await store.events(agent_id=agent_id)]


def test_the_reflection_transcript_holds_the_turns_not_what_the_harness_added() -> None:
    from orchestrator.models.types import Message
    from orchestrator.store.records import StoredMessage
    from subagents.reflection import render_transcript

    def stored(n: int, message: Message) -> StoredMessage:
        return StoredMessage(f"m{n}", n, "c", message, {}, "2026-01-01T00:00:00Z", None)

    text = render_transcript([
        stored(1, Message("user", "Note: 4 messages were hidden.\nThe following is a summary: the user likes owls", kind="summary")),
        stored(2, Message("user", "<system-reminder>agent info</system-reminder>", kind="reminder")),
        stored(3, Message("user", "I moved to Porto")),
        stored(4, Message("assistant", "Noted.")),
    ])  # fmt: skip
    assert text == "[user] I moved to Porto\n[assistant] Noted.\n"


@pytest.mark.parametrize("sandbox", ["bwrap", "off"])
async def test_a_reflection_that_moves_main_and_expires_the_reflog_loses_nothing(tmp_path: Path, sandbox: str) -> None:
    """The red-team case: while the main agent commits, a reflection's command points ``main`` at the
    first commit and expires every reflog. Confined, it cannot (the parent's refs and logs are
    read-only to it); unconfined, reverie finds ``main`` displaced when the reflection ends, puts it
    back with the main agent's commit, keeps what was there on a named ref and says so in the log."""
    from orchestrator.models.scripted import ScriptedModel
    from orchestrator.models.types import Message, ModelRequest, ModelResponse

    gate = anyio.Event()
    attacked = anyio.Event()
    rules = ScriptedModel()

    async def respond(request: ModelRequest) -> ModelResponse:
        last = request.messages[-1]
        if request.purpose == "reflect":
            if last.role == "tool":
                attacked.set()
                return ModelResponse(Message("assistant", "Reflection: nothing to add"))
            await gate.wait()
            command = (
                'cd "$MEMORY_DIR" && git update-ref refs/heads/main "$(git rev-list --max-parents=0 HEAD)"; '
                "git reflog expire --expire=now --all"
            )
            return ModelResponse(Message("assistant", "", tool_calls=(_bash_call(command),)))
        if request.purpose == "chat" and last.role == "user" and "commit this" in last.content:
            command = (
                "cd \"$MEMORY_DIR\" && sed -i 's/Nothing recorded yet./The user is Barbara./' human.md "
                "&& git commit -qam 'the main agent remembers Barbara'"
            )
            return ModelResponse(Message("assistant", "", tool_calls=(_bash_call(command),)))
        if request.purpose == "chat" and last.role == "tool":
            return ModelResponse(Message("assistant", "committed"))
        return await rules.complete(request)

    seen = Seen()
    model = ScriptedModel(script=[respond] * 40)
    cli = {**STEP3, "sandbox": sandbox}
    async with ChatSession.open(agent_id="r10", workspace=tmp_path, cli=cli, observer=seen, model=model) as session:
        memory = session.agent.memory_dir
        for text in ("my name is Barbara Liskov", "ok", "fine"):
            await session.send(text)
        assert seen.kinds().count("reflection.launch") == 1
        await session.send("commit this")
        agent_commit = (await _git(memory, "rev-parse", "HEAD")).strip()
        assert "the main agent remembers Barbara" in await _git(memory, "log", "-1", "--format=%s")
        gate.set()
        with anyio.fail_after(60):
            await attacked.wait()
        assert await session.supervisor.drain(30)
        assert (await _git(memory, "rev-parse", "main")).strip() == agent_commit
        assert "The user is Barbara." in (memory / "human.md").read_text(encoding="utf-8")
        assert (await _git(memory, "status", "--porcelain")) == ""
        warnings = [e.payload["message"] for e in await session.runtime.store.events(kinds=["memory.warning"])]
        displaced = await _git(memory, "for-each-ref", "--format=%(refname) %(objectname)", "refs/reverie/displaced/")
        first = (await _git(memory, "rev-list", "--max-parents=0", "HEAD")).strip()
        if sandbox == "bwrap":
            assert not displaced and not [w for w in warnings if "moved main" in w]
            assert agent_commit in await _git(memory, "reflog", "--format=%H", "main")
        else:
            assert displaced.split()[1:] == [first], displaced
            named = [w for w in warnings if "reflection-" in w and "moved main" in w and displaced.split()[0] in w]
            assert named, warnings


class IdleWait:
    """The session's idle wait (``ChatSession.open(idle_wait=...)``), ended by the test: it tells
    when the session starts waiting, what for, and whether a turn cut the wait short."""

    def __init__(self) -> None:
        self.waits: list[float] = []
        self.cut_short = 0
        self.waiting = anyio.Event()
        self.release = anyio.Event()

    async def __call__(self, seconds: float) -> None:
        self.waits.append(seconds)
        self.waiting.set()
        try:
            await self.release.wait()
        except anyio.get_cancelled_exc_class():
            self.cut_short += 1
            raise


class Launches(Seen):
    def __init__(self) -> None:
        super().__init__()
        self.launched = anyio.Event()

    async def __call__(self, event: Event) -> None:
        await super().__call__(event)
        if event.kind == "reflection.launch":
            self.launched.set()


async def test_a_session_idle_past_the_threshold_reflects(tmp_path: Path) -> None:
    seen, idle = Launches(), IdleWait()
    cli = {"reflection_trigger": "idle:30"}
    async with ChatSession.open(agent_id="idle", workspace=tmp_path, cli=cli, observer=seen, idle_wait=idle) as session:
        await session.send("my name is Ada Lovelace")
        await idle.waiting.wait()
        assert idle.waits == [30.0] and "reflection.launch" not in seen.kinds()
        assert session.supervisor.running == 0, "an idle wait is not subagent work: a one-shot does not wait for it"
        idle.release.set()
        await seen.launched.wait()
        assert await session.supervisor.drain(30)
        records = await session.runtime.store.reflections("idle")
        assert [(r.trigger, r.status) for r in records] == [("idle", "merged")]
        assert "Ada Lovelace" in (session.agent.memory_dir / "human.md").read_text(encoding="utf-8")


async def test_input_before_the_threshold_starts_the_idle_wait_again(tmp_path: Path) -> None:
    seen, idle = Launches(), IdleWait()
    cli = {"reflection_trigger": "idle:30"}
    async with ChatSession.open(agent_id="busy", workspace=tmp_path, cli=cli, observer=seen, idle_wait=idle) as session:
        await session.send("my name is Ada Lovelace")
        await idle.waiting.wait()
        idle.waiting = anyio.Event()
        await session.send("what a nice day")
        await idle.waiting.wait()
        assert idle.waits == [30.0, 30.0] and idle.cut_short == 1
        assert "reflection.launch" not in seen.kinds()
        assert await session.runtime.store.reflections("busy") == []


def _reflection_runs_forever(body: object) -> Planned:
    """The loopback server's answer: text for the main agent; for the reflection agent (its first
    message names the transcript) a bash call that commits one more line, every time."""
    messages = body.get("messages", []) if isinstance(body, dict) else []
    if not any("TRANSCRIPT_PATH" in str(m.get("content", "")) for m in messages):
        return text_reply("noted")
    n = sum(1 for m in messages if m.get("role") == "tool")
    command = f"cd \"$MEMORY_DIR\" && printf -- '- fact {n}\\n' >> human.md && git commit -qam 'feat(reflection): fact {n} 🔮'"
    return tool_call_reply("bash", json.dumps({"command": command}), id=f"call_{n}")


@pytest.mark.parametrize(
    ("setting", "value", "limit"),
    [("limit_reflection_calls", 3, "reflection.calls"), ("limit_reflection_tokens", 12_000, "reflection.tokens")],
)
async def test_a_reflection_that_calls_tools_forever_stops_at_its_limit_keeping_its_commits(
    tmp_path: Path, setting: str, value: int, limit: str
) -> None:
    from orchestrator.models.openai_client import OpenAIModel

    seen = Seen()
    with LoopbackOpenAI(fallback=_reflection_runs_forever) as server:
        model = OpenAIModel(base_url=server.base_url, model="loopback-model", max_attempts=1)
        cli = {**STEP3, setting: value}
        async with ChatSession.open(agent_id="rl", workspace=tmp_path, cli=cli, observer=seen, model=model) as session:
            memory = session.agent.memory_dir
            for text in ("my name is Ada", "ok", "fine"):
                assert (await session.send(text)).status == "end_turn"
            assert await session.supervisor.drain(60)
            records = await session.runtime.store.reflections("rl")
            assert [(r.status, r.reason_code) for r in records] == [("limit", "limit")]
            kept = records[0]
            assert kept.commits, "the reflection committed before its limit"
            assert kept.branch in await _git(memory, "branch", "--list", kept.branch)
            for sha in kept.commits:
                await _git(memory, "cat-file", "-e", sha)
            hits = [e for e in seen.events if e.kind == "limit.reached"]
            assert [(e.payload()["limit"], e.payload()["subject"]) for e in hits] == [(limit, kept.id)]
            outcomes = [e.payload() for e in seen.events if e.kind == "reflection.outcome"]
            assert [(o["outcome"], o["reason_code"]) for o in outcomes] == [("limit", limit)]
            assert "reflection.failed" not in seen.kinds()
            reflect_calls = [b for b in server.chat_bodies if "TRANSCRIPT_PATH" in json.dumps(b)]
            if setting == "limit_reflection_calls":
                assert len(reflect_calls) == value
            else:
                assert 1 < len(reflect_calls) < 12
            assert (await session.send("and now?")).status == "end_turn"
    worktrees = await _git(memory, "worktree", "list", "--porcelain")
    assert worktrees.count("worktree ") == 1
    assert "fact" not in (memory / "human.md").read_text(encoding="utf-8"), "kept on the branch, not merged"


async def test_a_resolver_that_calls_tools_forever_stops_at_its_call_limit_and_the_branch_is_kept(
    tmp_path: Path,
) -> None:
    from orchestrator.models.scripted import ScriptedModel
    from orchestrator.models.types import Message, ModelRequest, ModelResponse

    gate = anyio.Event()
    resolving: list[ModelRequest] = []

    async def respond(request: ModelRequest) -> ModelResponse:
        if request.purpose == "resolve":
            resolving.append(request)
            return ModelResponse(Message("assistant", "", tool_calls=(_bash_call("git status --short"),)))
        if request.purpose != "reflect":
            return ModelResponse(Message("assistant", "ok"))
        if any(m.role == "tool" for m in request.messages):
            return ModelResponse(Message("assistant", "Reflection: updated human.md"))
        await gate.wait()
        command = (
            "cd \"$MEMORY_DIR\" && sed -i 's/Nothing recorded yet./The user is Grace./' human.md "
            "&& git commit -qam 'feat(reflection): name 🔮'"
        )
        return ModelResponse(Message("assistant", "", tool_calls=(_bash_call(command),)))

    seen = Seen()
    model = ScriptedModel(script=[respond] * 20)
    cli = {**STEP3, "limit_resolver_calls": 2}
    async with ChatSession.open(agent_id="r5", workspace=tmp_path, cli=cli, observer=seen, model=model) as session:
        memory = session.agent.memory_dir
        for text in ("my name is Grace Hopper", "ok", "fine"):
            await session.send(text)
        human = memory / "human.md"
        text = await anyio.Path(human).read_text(encoding="utf-8")
        await anyio.Path(human).write_text(text.replace("Nothing recorded yet.", "The user is Linus."), encoding="utf-8")
        await _git(memory, "commit", "-qam", "main agent edits human.md")
        gate.set()
        assert await session.supervisor.drain(30)
        assert len(resolving) == 2, "the third resolver request was not sent"
        records = await session.runtime.store.reflections("r5")
        assert [r.status for r in records] == ["kept_conflict"]
        assert records[0].branch in await _git(memory, "branch", "--list", records[0].branch)
        hits = [e.payload() for e in seen.events if e.kind == "limit.reached"]
        assert [(h["limit"], h["subject"]) for h in hits] == [("resolver.calls", records[0].branch)]
        assert "The user is Linus." in await anyio.Path(human).read_text(encoding="utf-8")


class _HeldReflection:
    """The scripted model, with a reflection's first request held (or, ``after_commit``, the first
    after its bash call committed) until ``release`` is set; ``holding`` is set once one is held."""

    def __init__(self, *, after_commit: bool = False) -> None:
        from orchestrator.models.scripted import ScriptedModel

        self.rules = ScriptedModel()
        self.after_commit = after_commit
        self.holding = anyio.Event()
        self.release = anyio.Event()
        self.model = ScriptedModel(script=[self.respond] * 60)

    async def respond(self, request: object) -> object:
        from orchestrator.models.types import ModelRequest

        assert isinstance(request, ModelRequest)
        committed = any(call.name == "bash" for m in request.messages for call in m.tool_calls)
        if request.purpose == "reflect" and committed == self.after_commit and not self.release.is_set():
            self.holding.set()
            await self.release.wait()
        return await self.rules.complete(request)


async def _leave_for_next_time(session: ChatSession) -> list[list[object]]:
    """What the REPL does on Ctrl-D then Ctrl-C: wait for the running subagents, and stop waiting
    once the first countdown line is shown; returns what ``show`` was given."""
    shown: list[list[object]] = []
    stop = anyio.Event()

    def show(running: list[object]) -> None:
        shown.append(running)
        stop.set()

    assert await session.leave(show, stop) is False
    return shown


async def test_leaving_while_a_reflection_runs_records_it_interrupted_and_the_next_session_relaunches_it(
    tmp_path: Path,
) -> None:
    held = _HeldReflection()
    seen = Seen()
    cli = {"reflection_trigger": "off", "limit_reflection_seconds": 900}
    async with ChatSession.open(agent_id="gone", workspace=tmp_path, cli=cli, observer=seen, model=held.model) as session:
        memory = session.agent.memory_dir
        conversation = session.conversation_id
        await session.send("my name is Ada Lovelace")
        assert await session.reflect_now() == "manual"
        await held.holding.wait()
        shown = await _leave_for_next_time(session)
        state = await session.runtime.store.reflection_state(conversation, "gone")
    (running,) = shown[0]
    assert running.name.startswith("reflection ") and 890 < running.seconds_left <= 900
    records = await _records("gone")
    assert [(r.status, r.reason_code) for r in records] == [("interrupted", "interrupted")]
    assert "relaunches it" in (records[0].reason or "")
    outcomes = [e.payload() for e in seen.events if e.kind == "reflection.outcome"]
    assert [o["outcome"] for o in outcomes] == ["interrupted"]
    assert "reflection.failed" not in seen.kinds()
    assert (await _git(memory, "worktree", "list", "--porcelain")).count("worktree ") == 1
    held.release.set()
    again = Launches()
    async with ChatSession.open(agent_id="gone", workspace=tmp_path, cli=cli, observer=again, model=held.model) as session:
        assert session.conversation_id == conversation
        await again.launched.wait()
        assert await session.supervisor.drain(60)
        records = await session.runtime.store.reflections("gone")
        after = await session.runtime.store.reflection_state(conversation, "gone")
    assert [(r.trigger, r.status) for r in records] == [("manual", "relaunched"), ("relaunch", "merged")]
    assert state.consecutive_failures == 0, "an interruption is no failure"
    assert after.reflected_through_seq > state.reflected_through_seq
    assert "Ada Lovelace" in (memory / "human.md").read_text(encoding="utf-8")


async def _records(agent_id: str) -> list[Any]:
    from orchestrator.store import Store

    async with Store.opened() as store:
        return list(await store.reflections(agent_id))


async def test_an_interrupted_reflection_that_committed_is_merged_by_the_next_session(tmp_path: Path) -> None:
    held = _HeldReflection(after_commit=True)
    cli = {"reflection_trigger": "off"}
    async with ChatSession.open(agent_id="half", workspace=tmp_path, cli=cli, model=held.model) as session:
        memory = session.agent.memory_dir
        await session.send("my name is Ada Lovelace")
        await session.reflect_now()
        await held.holding.wait()
        await _leave_for_next_time(session)
    (record,) = await _records("half")
    assert (record.status, len(record.commits)) == ("interrupted", 1) and "merges its commits" in (record.reason or "")
    assert record.branch in await _git(memory, "branch", "--list", record.branch), "its commit is kept on its branch"
    assert "Ada Lovelace" not in (memory / "human.md").read_text(encoding="utf-8")
    held.release.set()
    seen = Seen()
    async with ChatSession.open(agent_id="half", workspace=tmp_path, cli=cli, model=held.model, observer=seen) as session:
        assert "Ada Lovelace" in (memory / "human.md").read_text(encoding="utf-8"), "merged at start-up, before any turn"
        assert await session.supervisor.drain(60)
        records = await session.runtime.store.reflections("half")
    assert [r.status for r in records] == ["merged"], "merged, not relaunched on top"
    assert "reflection.launch" not in seen.kinds()


async def test_a_reflection_that_finishes_while_the_session_waits_to_leave_merges(tmp_path: Path) -> None:
    held = _HeldReflection()
    shown: list[list[Any]] = []
    released = anyio.Event()

    def show(running: list[Any]) -> None:
        shown.append(running)
        held.release.set()

    async with ChatSession.open(agent_id="stay", workspace=tmp_path, cli={"reflection_trigger": "off"}, model=held.model) as session:
        await session.send("my name is Ada Lovelace")
        await session.reflect_now()
        await held.holding.wait()
        assert await session.leave(show, released) is True
        assert session.supervisor.running == 0
    assert shown and [r.status for r in await _records("stay")] == ["merged"]

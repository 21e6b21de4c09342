"""V2: a session publishes each memory commit once, named by its source: its own bash call's, a
merged reflection's, or another process's (real git; a session end to end with the scripted model)."""

from __future__ import annotations

import io
import os
from functools import partial
from pathlib import Path

import anyio
import pytest

from orchestrator.app.memory_events import MemoryTracker
from orchestrator.app.session import ChatSession
from orchestrator.base.events import (
    Event,
    LockWaiting,
    MemoryCommitted,
    ToolFinished,
    ToolStarted,
    TurnStarted,
)
from orchestrator.base.subagent_events import ReflectionMerged
from orchestrator.cli.render import TerminalRenderer
from orchestrator.memfs.lockowner import WAIT_LINE_PREFIX
from orchestrator.memfs.names import LOCK_FILE_NAME
from tests.memfs.reflection_helpers import commit_file, git, make_repo
from tests.support import holders, lock_held_elsewhere, wait_until

pytestmark = pytest.mark.anyio


def _note(name: str, body: str) -> str:
    return f"---\nname: {name}\ndescription: a note\n---\n{body}\n"


class Published:
    def __init__(self) -> None:
        self.commits: list[MemoryCommitted] = []

    async def __call__(self, event: Event) -> None:
        assert isinstance(event, MemoryCommitted)
        self.commits.append(event)

    def sources(self) -> list[tuple[str, str]]:
        return [(c.source, c.by) for c in self.commits]


async def _commit(repo: Path, rel: str, body: str, message: str) -> str:
    return await anyio.to_thread.run_sync(commit_file, repo, rel, _note(rel.split("/")[-1][:-3], body), message)


async def test_a_bash_call_claims_only_the_commits_its_output_names(tmp_path: Path) -> None:
    repo = await anyio.to_thread.run_sync(make_repo, tmp_path / "m")
    published = Published()
    tracker = MemoryTracker(repo, published)
    await tracker(TurnStarted("turn-1", "c"))
    other_between = await _commit(repo, "notes/a.md", "a", "other process between turns")
    await tracker(ToolStarted("call-1", "bash", "{}"))
    assert published.sources() == [("other", "other process between turns")]
    # another process commits while the agent's command waits for the lock, then the agent's own lands
    theirs = await _commit(repo, "notes/b.md", "b", "the other REPL's edit")
    mine = await _commit(repo, "notes/c.md", "c", "feat: my edit")
    await tracker(ToolFinished("call-1", "bash", True, f"[main {mine[:7]}] feat: my edit\n 1 file changed"))
    assert published.sources()[1:] == [("other", "the other REPL's edit"), ("turn", "turn-1")]
    assert [c.revision for c in published.commits] == [other_between, theirs, mine]
    assert [c.previous_revision for c in published.commits[1:]] == [other_between, theirs]
    assert published.commits[2].files == ("notes/c.md",)
    # a quiet commit (`git commit -q`) in the call's window is the turn's: nothing tells it apart
    await tracker(ToolStarted("call-2", "bash", "{}"))
    quiet = await _commit(repo, "notes/d.md", "d", "quiet")
    await tracker(ToolFinished("call-2", "bash", True, ""))
    assert published.commits[-1].revision == quiet and published.sources()[-1] == ("turn", "turn-1")
    # a merged reflection's commits are the reflection's; a deletion is a delete
    await anyio.to_thread.run_sync(lambda: git(repo, "rm", "-q", "notes/d.md"))
    await anyio.to_thread.run_sync(lambda: git(repo, "commit", "-q", "-m", "reflection: drop d"))
    await tracker(ReflectionMerged("r-1", "reverie/reflection/r-1", 1, "x"))
    last = published.commits[-1]
    assert (last.source, last.by, last.operation, last.files) == ("reflection", "r-1", "delete", ("notes/d.md",))
    assert len(published.commits) == len({c.revision for c in published.commits}), "each change once"


async def test_a_session_logs_its_own_commit_and_names_another_processs(tmp_path: Path) -> None:
    async with ChatSession.open(agent_id="own", workspace=tmp_path) as session:
        await session.send("remember that I like owls")
        memory = session.agent.memory_dir
        await anyio.to_thread.run_sync(commit_file, memory, "notes.md", _note("notes", "x"), "edit from elsewhere")
        await session.send("hello")
        logged = await session.runtime.store.events(agent_id="own", kinds=["memory.commit"])
    assert [(e.payload["source"], e.payload["by"]) for e in logged][-1] == ("other", "edit from elsewhere")
    own = logged[0].payload
    assert own["source"] == "turn" and own["files"] == ["human.md"]
    assert own["revision"] != logged[-1].payload["revision"]


async def test_two_sessions_on_one_conversation_say_they_wait_and_show_only_their_own_change(tmp_path: Path) -> None:
    """The two-REPL story (V2): a second session's turn queued behind another's on the same
    conversation says so in a line, and the first one's memory edit reaches it named as another
    process's change, never as its own (two sessions in one process hold the conversation's
    cross-process lock as two processes would)."""
    shown = io.StringIO()
    renderer = TerminalRenderer(io.StringIO(), activity=shown, columns=lambda: None)  # as the REPL sets it up
    renderer.memory_changes = True
    first_in_turn, release = anyio.Event(), anyio.Event()

    async def first_observer(event: Event) -> None:
        if isinstance(event, ToolFinished):
            first_in_turn.set()
            await release.wait()

    async with ChatSession.open(agent_id="two", workspace=tmp_path / "a", observer=first_observer) as first:
        conversation = first.conversation_id
        queued = anyio.Event()

        async def second_observer(event: Event) -> None:
            await renderer(event)
            if isinstance(event, LockWaiting):
                queued.set()

        async with ChatSession.open(
            agent_id="two", workspace=tmp_path / "b", conversation_id=conversation, observer=second_observer
        ) as second:
            renderer.memory_dir = second.agent.memory_dir
            await second.send("hello")  # the second session's baseline
            async with anyio.create_task_group() as tg:
                tg.start_soon(first.send, "remember that I like owls")
                await first_in_turn.wait()  # the first committed and still holds its turn
                tg.start_soon(second.send, "remember that I prefer tea")
                with anyio.fail_after(60):  # a deadline that fails loudly, not a wait on the clock
                    await queued.wait()
                release.set()
    lines = shown.getvalue().splitlines()
    said = next(i for i, line in enumerate(lines) if "another reverie process is running a turn" in line)
    other = next(i for i, line in enumerate(lines) if "memory changed by another process: human.md" in line)
    own = [line for line in lines if line.startswith("  ↻ memory: ")]
    assert said < other
    assert len(own) == 1 and "human.md +1" in own[0]
    assert any("prefer tea" in line for line in lines[lines.index(own[0]):]), lines
    assert not any("owls" in line for line in lines[lines.index(own[0]):]), "the first one's edit is not shown as its own"


def _trailers(repo: Path) -> dict[str, tuple[str, str]]:
    """commit -> (its Reverie-Source, its Reverie-Conversation) as git itself reads the trailers."""
    said = git(
        repo, "log", "--format=%H%x1f%(trailers:key=Reverie-Source,valueonly,separator=)"
        "%x1f%(trailers:key=Reverie-Conversation,valueonly,separator=)%x1e",
    )
    found = {}
    for record in said.split("\x1e"):
        if record.strip():
            sha, source, conversation = record.strip("\n").split("\x1f")
            found[sha] = (source.strip() or "outside", conversation.strip())
    return found


async def test_two_sessions_on_one_agent_and_a_hand_commit_are_named_by_their_trailers(tmp_path: Path) -> None:
    """V3: each ``memory.commit`` carries what its commit's trailers say (git's own reading is the
    oracle), so another session's turn on the same agent is never taken for this one's, and only a
    commit without trailers reads as ``outside``."""
    async with (
        ChatSession.open(agent_id="pair", workspace=tmp_path / "a") as first,
        ChatSession.open(agent_id="pair", workspace=tmp_path / "b", new=True) as second,
    ):
        assert first.conversation_id != second.conversation_id
        memory = first.agent.memory_dir
        await first.send("remember that I like owls")
        await second.send("remember that I prefer tea")
        hand = await _commit(memory, "notes.md", "by hand", "a hand edit")
        await first.send("hello")
        await second.send("hello")
        events = await first.runtime.store.events(agent_id="pair", kinds=["memory.commit"])
    truth = await anyio.to_thread.run_sync(_trailers, memory)
    seen: dict[str, list[dict[str, object]]] = {}
    for event in events:
        seen.setdefault(str(event.conversation_id), []).append(event.payload)
    for session in (first, second):
        mine = seen[session.conversation_id]
        assert mine, "each session logged the commits it saw"
        for payload in mine:
            source, conversation = truth[str(payload["revision"])]
            provenance = payload["provenance"]
            assert isinstance(provenance, dict)
            assert provenance["source"] == source
            assert provenance.get("conversation", "") == conversation
            own = source == "agent" and conversation == session.conversation_id
            assert (payload["source"] == "turn") == own, payload
        by_revision = {p["revision"]: p for p in mine}
        assert by_revision[hand]["provenance"] == {"source": "outside"} and by_revision[hand]["source"] == "other"
    # the first session saw the second one's turn: an agent commit that is not its own
    theirs = [p for p in seen[first.conversation_id] if p["provenance"].get("conversation") == second.conversation_id]
    assert theirs and all(p["source"] == "other" and p["provenance"]["source"] == "agent" for p in theirs)


async def test_a_turn_whose_sync_queues_behind_another_processs_lock_says_so(tmp_path: Path) -> None:
    """V5: another process holds the memory repository's lock (and commits under it) while this
    session's turn ends: the session says in a line that its sync is queued behind that process,
    goes on once it lets go, and shows the other process's commit as that process's, not its own."""
    shown = io.StringIO()
    renderer = TerminalRenderer(io.StringIO(), activity=shown, columns=lambda: None)
    renderer.memory_changes = True
    queued = anyio.Event()
    kinds: list[str] = []

    async def observer(event: Event) -> None:
        await renderer(event)
        if isinstance(event, LockWaiting):
            kinds.append(event.what)
            queued.set()

    async with ChatSession.open(agent_id="queued", workspace=tmp_path, observer=observer) as session:
        memory = session.agent.memory_dir
        renderer.memory_dir = memory
        await session.send("hello")  # the tracker's baseline
        async with anyio.create_task_group() as tg:
            async with lock_held_elsewhere(memory):
                tg.start_soon(session.send, "how are you")
                with anyio.fail_after(60):  # a deadline that fails loudly, not a wait on the clock
                    await queued.wait()
                theirs = await _commit(memory, "notes.md", "theirs", "the other REPL's edit")
        logged = await session.runtime.store.events(agent_id="queued", kinds=["memory.commit"])
    assert kinds == ["memory"]
    lines = shown.getvalue().splitlines()
    said = next(i for i, line in enumerate(lines) if "memory sync is queued behind it" in line)
    other = next(i for i, line in enumerate(lines) if "memory changed by another process: notes.md" in line)
    assert said < other
    assert not any(line.startswith("  ↻ memory: ") for line in lines), "nothing shown as this session's own"
    assert [(e.payload["revision"], e.payload["source"]) for e in logged] == [(theirs, "other")]


_SLOW_HOOK = """#!/bin/sh
if [ "$CONVERSATION_ID" = {conversation} ]; then
    echo held > {ready}
    read line < {go}
fi
exec {hook} "$@"
"""


def _slow_hook(memory: Path, conversation: str) -> tuple[Path, Path]:
    """Make the pre-commit hook of ``conversation``'s commits wait for the test: it says so on the
    first fifo, then reads the second; reverie's own hook runs after it."""
    hooks = memory / ".git" / "hooks"  # where reverie installs it (memfs/hook.install_hook)
    (hooks / "pre-commit").rename(hooks / "reverie-pre-commit")
    ready, go = memory / ".git" / "test-ready", memory / ".git" / "test-go"
    os.mkfifo(ready)
    os.mkfifo(go)
    text = _SLOW_HOOK.format(conversation=conversation, ready=ready, go=go, hook=hooks / "reverie-pre-commit")
    (hooks / "pre-commit").write_text(text)
    (hooks / "pre-commit").chmod(0o755)
    return ready, go


async def test_a_bash_commit_queued_behind_another_sessions_commit_says_so_and_shows_only_its_own(
    tmp_path: Path,
) -> None:
    """The two-REPL story of V7: session A's commit is slow (its pre-commit hook waits for the test)
    while session B's bash commit comes: B's git says in its output, as its wait starts, that the
    memory is locked by A's committing git (its reverie process and conversation), B's REPL shows that once in a
    line of its own, and B's own change is only B's commit; A's is named as another's by its
    trailers."""
    shown = io.StringIO()
    renderer = TerminalRenderer(io.StringIO(), activity=shown, columns=lambda: None)  # as the REPL sets it up
    renderer.memory_changes = True
    outputs: list[str] = []

    async def second_observer(event: Event) -> None:
        await renderer(event)
        if isinstance(event, ToolFinished):
            outputs.append(event.output)

    async with (
        ChatSession.open(agent_id="slow", workspace=tmp_path / "a") as first,
        ChatSession.open(agent_id="slow", workspace=tmp_path / "b", new=True, observer=second_observer) as second,
    ):
        memory = first.agent.memory_dir
        renderer.memory_dir = memory
        await second.send("hello")  # the tracker's baseline
        ready, go = await anyio.to_thread.run_sync(_slow_hook, memory, first.conversation_id)
        lock = memory / ".git" / LOCK_FILE_NAME
        async with anyio.create_task_group() as tg:
            tg.start_soon(first.send, "remember that I like slow owls")
            with anyio.fail_after(60):  # a deadline that fails loudly, not a wait on the clock
                await anyio.to_thread.run_sync(ready.read_text)  # A's git holds the lock, in its hook
            tg.start_soon(second.send, "remember that I prefer tea")
            await anyio.to_thread.run_sync(partial(
                wait_until, lambda: any("git-wrapper.py" in c for _, c in holders(lock)), timeout=60,
                what="B's git waiting on the repository lock"))  # fmt: skip
            await anyio.to_thread.run_sync(go.write_text, "go\n")
        logged = await second.runtime.store.events(agent_id="slow", kinds=["memory.commit"])
    truth = await anyio.to_thread.run_sync(_trailers, memory)
    waited = [line for output in outputs for line in output.splitlines() if line.startswith(WAIT_LINE_PREFIX)]
    assert len(waited) == 1, (outputs, shown.getvalue())
    # A's git is named by the reverie process that ran it (both sessions run in this one) and its conversation
    assert waited == [f"{WAIT_LINE_PREFIX} (pid {os.getpid()}, agent commit in conversation {first.conversation_id}); waiting"]
    lines = shown.getvalue().splitlines()
    said = [line for line in lines if "⏳ the agent's git command waited" in line]
    assert len(said) == 1 and f"agent commit in conversation {first.conversation_id}" in said[0], lines
    mine = [e.payload for e in logged if e.conversation_id == second.conversation_id]
    own = [p["revision"] for p in mine if p["source"] == "turn"]
    assert own and all(truth[str(r)] == ("agent", second.conversation_id) for r in own)
    theirs = [p for p in mine if truth[str(p["revision"])] == ("agent", first.conversation_id)]
    assert theirs and all(p["source"] == "other" for p in theirs)
    shown_own = [line for line in lines if line.startswith("  ↻ memory: ")]
    assert shown_own and not any("owls" in line for line in lines[lines.index(shown_own[0]):]), lines

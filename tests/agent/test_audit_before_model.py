"""M8 before the model: a tree committed with ``--no-verify`` is audited before any request uses it;
its content never reaches the provider, S12's MEMORY INVALID reminder does (loopback server, real git,
real bubblewrap for the agent's own commit)."""

from __future__ import annotations

import base64
import json
from collections.abc import Iterator
from pathlib import Path

import anyio
import pytest

from orchestrator.agent.audit import compile_audited
from orchestrator.app.session import ChatSession
from orchestrator.base.paths import agent_memory_dir
from orchestrator.memfs.git import GitRepo
from orchestrator.models.openai_client import OpenAIModel
from orchestrator.testing.openai_server import LoopbackOpenAI, text_reply, tool_call_reply
from tests.support import SleepRecorder

pytestmark = pytest.mark.anyio

SECRET = "smuggled-payload-7731"
FIXED = "fixed-content-8842"


@pytest.fixture
def server() -> Iterator[LoopbackOpenAI]:
    with LoopbackOpenAI() as srv:
        yield srv


def _model(server: LoopbackOpenAI) -> OpenAIModel:
    return OpenAIModel(base_url=server.base_url, model="loopback-model", sleep=SleepRecorder(), max_attempts=1)


def _hidden(text: str) -> str:
    """A shell expression printing ``text`` without the text itself appearing in the tool call."""
    return f"$(echo {base64.b64encode(text.encode()).decode()} | base64 -d)"


def _bash(command: str) -> str:
    return json.dumps({"command": command})


async def test_no_verify_commit_in_a_turn_never_reaches_a_request(server: LoopbackOpenAI, tmp_path: Path) -> None:
    smuggle = f'cd "$MEMORY_DIR" && printf "%s\\n" "{_hidden(SECRET)}" > smuggled.md && git add smuggled.md && git commit -q --no-verify -m smuggle'
    fix = (
        f'cd "$MEMORY_DIR" && printf -- "---\\nname: smuggled\\ndescription: fixed\\n---\\n%s\\n" "{_hidden(FIXED)}" > smuggled.md '
        "&& git add smuggled.md && git commit -q -m fix"
    )
    server.enqueue(
        text_reply("hello"),
        tool_call_reply("bash", _bash(smuggle)),
        text_reply("committed"),
        tool_call_reply("bash", _bash(fix)),
        text_reply("fixed"),
    )
    async with ChatSession.open(agent_id="a1", model=_model(server), workspace=tmp_path) as session:
        assert (await session.send("hi")).status == "end_turn"
        assert (await session.send("smuggle it")).status == "end_turn"
        after_smuggle = json.dumps(server.chat_bodies)
        assert (await session.send("now fix it")).status == "end_turn"
    bodies = json.dumps(server.chat_bodies)
    assert SECRET not in bodies
    assert "MEMORY INVALID: the committed memory at" in after_smuggle
    assert "smuggled.md: missing frontmatter" in after_smuggle
    assert FIXED in bodies and "<memory_update>" in bodies.split("now fix it", 1)[1]


async def test_fresh_conversation_on_an_invalid_head_gets_the_last_valid_memory(
    server: LoopbackOpenAI, tmp_path: Path
) -> None:
    server.enqueue(text_reply("one"), text_reply("two"))
    async with ChatSession.open(agent_id="a2", model=_model(server), workspace=tmp_path) as session:
        await session.send("hi")
    repo = agent_memory_dir("a2")
    await anyio.Path(repo / "persona.md").write_text(f"no frontmatter any more {SECRET}\n")

    def commit() -> str:
        GitRepo(repo).run("commit", "-q", "--no-verify", "-am", "smuggle")
        return GitRepo(repo).run("rev-parse", "HEAD").stdout.strip()

    head = await anyio.to_thread.run_sync(commit)
    async with ChatSession.open(agent_id="a2", model=_model(server), workspace=tmp_path, new=True) as session:
        assert (await session.send("hello again")).status == "end_turn"
    body = server.chat_bodies[-1]
    assert SECRET not in json.dumps(body)
    assert "I am a helpful assistant" in body["messages"][0]["content"], "the last valid memory is kept"
    reminders = [m["content"] for m in body["messages"] if "MEMORY INVALID" in m["content"]]
    assert len(reminders) == 1 and f"at {head[:7]} fails validation" in reminders[0]
    assert "persona.md: missing frontmatter" in reminders[0]


async def test_compile_audited_without_any_valid_revision_sends_no_memory(tmp_path: Path) -> None:
    repo = tmp_path / "m"

    def build() -> None:
        repo.mkdir()
        GitRepo(repo).run("init", "-q", "-b", "main")
        (repo / "MEMORY.md").write_text("# Memory\n")
        (repo / "notes.md").write_text(f"{SECRET}\n")
        GitRepo(repo).run("add", ".")
        GitRepo(repo).run("-c", "user.name=t", "-c", "user.email=t@t", "commit", "-q", "--no-verify", "-m", "bad")

    await anyio.to_thread.run_sync(build)
    audited = await anyio.to_thread.run_sync(lambda: compile_audited(repo, "SYS {CORE_MEMORY} END", agent_id="a"))
    assert audited.errors and audited.invalid_revision is not None
    assert SECRET not in audited.compiled.content and audited.compiled.content == "SYS  END"

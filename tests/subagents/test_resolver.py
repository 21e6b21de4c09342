"""The resolve policy of D3 end to end: real git, the resolver subagent on the scripted
model (union, driven by the rule text in its request), and the harness's checks."""

from __future__ import annotations

import json
import os
import threading
from pathlib import Path

import anyio
import anyio.to_thread
import pytest

from orchestrator.memfs.gitwrap import ensure_wrapper
from orchestrator.memfs.merge import MergeOutcome, finalize_worktree
from orchestrator.memfs.resolution import Conflict
from orchestrator.memfs.worktrees import create_worktree, list_reflections
from orchestrator.models.openai_client import OpenAIModel
from orchestrator.models.scripted import ScriptedModel
from orchestrator.models.scripted_resolve import union_text
from orchestrator.testing.openai_server import LoopbackOpenAI, Planned, text_reply, tool_call_reply
from subagents.resolver import ResolverSubagent, make_resolver
from tests.memfs.reflection_helpers import commit_file, git, make_repo, note, write
from tests.support import SleepRecorder

pytestmark = pytest.mark.anyio


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    return make_repo(tmp_path / "memory")


async def _git(cwd: Path, *args: str) -> str:
    return await anyio.to_thread.run_sync(lambda: git(cwd, *args))


def _hot(*lines: str) -> str:
    return "---\nname: hot\ndescription: shared\n---\n" + "".join(f"{line}\n" for line in lines)


def test_union_keeps_both_sides_each_line_once_heads_order_first() -> None:
    assert union_text("a\nb\nc\n", "a\nx\nc\ny\nx\n") == "a\nb\nc\nx\ny\n"
    assert union_text(_hot("base", "head"), _hot("base", "branch")) == _hot("base", "head", "branch")


async def test_conflict_is_resolved_inside_the_rebase_and_fast_forwarded(repo: Path) -> None:
    wt = await create_worktree(repo, agent_id="a")
    await anyio.to_thread.run_sync(commit_file, wt.path, "notes/hot.md", _hot("base", "the branch learned"), "r1")
    await anyio.to_thread.run_sync(commit_file, wt.path, "notes/other.md", note("other", "x"), "r2")
    main = await anyio.to_thread.run_sync(commit_file, repo, "notes/hot.md", _hot("base", "the agent wrote"), "main")
    outcome = await finalize_worktree(repo, wt, resolver=make_resolver(ScriptedModel(), agent_id="a"))
    assert (outcome.status, outcome.resolved_files) == ("resolved", ("notes/hot.md",))
    assert outcome.new_head == (await _git(repo, "rev-parse", "HEAD")).strip()
    assert await anyio.Path(repo / "notes" / "hot.md").read_text() == _hot("base", "the agent wrote", "the branch learned")
    # Linear history containing the agent's commit, no merge commit (R3).
    assert (await _git(repo, "log", "--format=%s")).split()[:3] == ["r2", "r1", "main"]
    assert (await _git(repo, "rev-list", "--merges", "HEAD")) == ""
    assert main in (await _git(repo, "rev-list", "HEAD")).split()
    assert await list_reflections(repo) == ()
    assert (await _git(repo, "status", "--porcelain")) == ""
    assert (await _git(repo, "for-each-ref", "refs/reverie/")) == ""


async def test_without_the_rule_in_its_request_the_conflict_stays_kept(repo: Path) -> None:
    """S27: the scripted model resolves only while the rule's text is in the request."""

    class NoRule(ResolverSubagent):
        def system_prompt(self) -> str:
            return "You are the merge resolver. Do what you think is right.\n"

    wt = await create_worktree(repo, agent_id="a")
    r1 = await anyio.to_thread.run_sync(commit_file, wt.path, "notes/hot.md", _hot("base", "branch"), "r1")
    await anyio.to_thread.run_sync(commit_file, repo, "notes/hot.md", _hot("base", "agent"), "main")
    outcome = await finalize_worktree(repo, wt, resolver=NoRule(ScriptedModel(), "a"))
    assert (outcome.status, outcome.reason_code) == ("kept", "conflict")
    assert outcome.reason is not None and outcome.reason.startswith("the resolver could not reconcile the changes: ")
    assert outcome.commits == (r1,)
    assert (await _git(repo, "rev-parse", wt.branch)).strip() == r1
    assert (await _git(repo, "status", "--porcelain")) == ""
    assert (await _git(repo, "for-each-ref", "refs/reverie/")) == ""


async def test_a_resolver_that_leaves_markers_is_refused(repo: Path) -> None:
    async def lazy(conflict: Conflict) -> None:
        await _git(conflict.worktree, "add", "--", *conflict.files)

    wt = await create_worktree(repo, agent_id="a")
    await anyio.to_thread.run_sync(commit_file, wt.path, "notes/hot.md", _hot("base", "branch"), "r1")
    await anyio.to_thread.run_sync(commit_file, repo, "notes/hot.md", _hot("base", "agent"), "main")
    outcome = await finalize_worktree(repo, wt, resolver=lazy)
    assert outcome.status == "kept"
    assert outcome.reason == "the resolver could not reconcile the changes: conflict markers left in notes/hot.md"
    assert await anyio.Path(repo / "notes" / "hot.md").read_text() == _hot("base", "agent")


async def test_an_agent_commit_never_waits_for_the_resolvers_model(repo: Path) -> None:
    """A5, through the loopback server: the resolver's model call takes up to 20 s (the
    server holds its answer until the test releases it); meanwhile the agent's own ``git commit``
    through reverie's wrapper, allowed to wait 2 s for the lock, goes through, and the resolved
    branch is then merged on top of that commit."""
    wt = await create_worktree(repo, agent_id="a")
    await anyio.to_thread.run_sync(commit_file, wt.path, "notes/hot.md", _hot("base", "the branch learned"), "r1")
    await anyio.to_thread.run_sync(commit_file, repo, "notes/hot.md", _hot("base", "the agent wrote"), "main")
    resolved_text = _hot("base", "the agent wrote", "the branch learned")
    asked, release = threading.Event(), threading.Event()

    def slow_model(body: object) -> Planned:
        asked.set()
        release.wait(20)
        command = f"cat > notes/hot.md <<'EOF'\n{resolved_text}EOF\ngit add notes/hot.md"
        return tool_call_reply("bash", json.dumps({"command": command}))

    wrapper = await anyio.to_thread.run_sync(ensure_wrapper, repo / ".git")
    env = {**os.environ, "REVERIE_GIT_LOCK_WAIT": "2"}
    outcome: list[MergeOutcome] = []
    with LoopbackOpenAI() as server:
        server.enqueue(slow_model, text_reply("resolved by union"))
        model = OpenAIModel(base_url=server.base_url, model="loopback-model", sleep=SleepRecorder(), max_attempts=1)
        resolver = make_resolver(model, agent_id="a")

        async def merge() -> None:
            outcome.append(await finalize_worktree(repo, wt, resolver=resolver))

        async with anyio.create_task_group() as tg:
            tg.start_soon(merge)
            assert await anyio.to_thread.run_sync(asked.wait, 60), "the resolver never asked its model"
            await anyio.to_thread.run_sync(write, repo / "notes" / "agent.md", note("agent", "mine"))
            add = await anyio.run_process([str(wrapper / "git"), "add", "notes/agent.md"], cwd=repo, env=env, check=False)
            commit = await anyio.run_process(
                [str(wrapper / "git"), "commit", "-q", "-m", "agent commit"], cwd=repo, env=env, check=False
            )
            model_still_busy = not release.is_set()
            release.set()
    assert model_still_busy
    assert (add.returncode, commit.returncode) == (0, 0), commit.stderr.decode()
    assert outcome[0].status == "resolved" and outcome[0].resolved_files == ("notes/hot.md",)
    assert (await _git(repo, "log", "--format=%s")).split("\n")[:3] == ["r1", "agent commit", "main"]
    assert await anyio.Path(repo / "notes" / "hot.md").read_text() == resolved_text
    assert (await _git(repo, "status", "--porcelain")) == ""


async def test_a_resolver_command_that_appends_exec_to_its_todo_runs_nothing_outside_the_sandbox(
    repo: Path, tmp_path: Path
) -> None:
    """The red-team case: the model's bash appends ``exec`` to the stopped rebase's todo, then
    resolves as asked. The rebase's state is read-only in its sandbox, so the line never lands,
    and reverie's ``--continue`` (outside the sandbox) runs nothing the model wrote."""
    from orchestrator.models.types import Message, ModelRequest, ModelResponse, ToolCall

    wt = await create_worktree(repo, agent_id="a")
    await anyio.to_thread.run_sync(commit_file, wt.path, "notes/hot.md", _hot("base", "branch"), "r1")
    await anyio.to_thread.run_sync(commit_file, repo, "notes/hot.md", _hot("base", "agent"), "main")
    marker = tmp_path / "pwned"
    said: list[str] = []
    command = (
        f"printf 'exec touch {marker}\\n' >> \"$(git rev-parse --path-format=absolute --git-path rebase-merge/git-rebase-todo)\"; "
        "printf -- '---\\nname: hot\\ndescription: shared\\n---\\nbase\\nagent\\nbranch\\n' > notes/hot.md && git add notes/hot.md"
    )

    async def respond(request: ModelRequest) -> ModelResponse:
        if request.messages[-1].role == "tool":
            said.append(request.messages[-1].content)
            return ModelResponse(Message("assistant", "resolved"))
        return ModelResponse(Message("assistant", "", tool_calls=(ToolCall("c1", "bash", json.dumps({"command": command})),)))

    outcome = await finalize_worktree(repo, wt, resolver=ResolverSubagent(ScriptedModel(script=[respond] * 4), "a"))
    assert not marker.exists()
    assert said and "Read-only file system" in said[0], said
    assert outcome.status == "resolved", outcome
    assert await anyio.Path(repo / "notes" / "hot.md").read_text() == _hot("base", "agent", "branch")

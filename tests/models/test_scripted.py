"""ScriptedModel: stateless rule following, the remember and recall flows, summaries, reflection."""

from __future__ import annotations

import json
import os
import subprocess
import tempfile
from pathlib import Path

import pytest
from anyio import Path as AsyncPath
from anyio import to_thread
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from orchestrator.base.identifiers import extract_identifiers
from orchestrator.models import (
    Message,
    ModelError,
    ModelRequest,
    ModelResponse,
    ScriptedModel,
    ToolSpec,
    Usage,
)
from orchestrator.models.scripted import CONFIRMATION, CONFIRMATION_ZH
from orchestrator.models.scripted_rules import remember_command

BASH = ToolSpec("bash", "Run a shell command")
SEARCH = ToolSpec("conversation_search", "Search earlier messages")
OWL_RULE = "- 回答末尾总是加上 🦉"


def memory_update(core: str) -> Message:
    text = (
        "<system-reminder>\n<memory_update>\nThe local memory filesystem has been edited and committed at revision "
        f"{'a' * 40}.\nThis updates part of your persona/system memory.\n\n{core}\n</memory_update>\n</system-reminder>"
    )
    return Message("user", text, kind="memory_update")


def chat(
    *messages: Message, system: str = "You are reverie.", tools: tuple[ToolSpec, ...] = (BASH,)
) -> ModelRequest:
    return ModelRequest(system=system, messages=messages, tools=tools)


async def reply(request: ModelRequest) -> ModelResponse:
    return await ScriptedModel().complete(request)


async def git(repo: Path, *args: str) -> str:
    return await _run(["git", "-C", str(repo), *args])


async def _run(argv: list[str], env: dict[str, str] | None = None) -> str:
    """Through a worker thread: asyncio's own subprocess spawn calls Popen on the loop thread."""
    result = await to_thread.run_sync(lambda: subprocess.run(argv, env=env, check=True, capture_output=True))
    return result.stdout.decode()


async def memory_repo(tmp_path: Path, files: dict[str, str]) -> Path:
    repo = tmp_path / "memory"
    await AsyncPath(repo).mkdir()
    await git(repo, "init", "-q", "-b", "main")
    for name, text in files.items():
        await AsyncPath(repo / name).write_text(text, encoding="utf-8")
    if files:
        await git(repo, "add", "--", *files)
        await git(repo, "commit", "-q", "-m", "init")
    return repo


async def run_bash(command: str, repo: Path) -> str:
    env = {**os.environ, "MEMORY_DIR": str(repo)}
    return await _run(["bash", "-c", command], env)


@pytest.mark.anyio
async def test_plain_answers_in_both_languages() -> None:
    assert (await reply(chat(Message("user", "hello")))).message.content == "(mock) I heard: hello"
    assert (await reply(chat(Message("user", "你好")))).message.content == "（mock）我听到了：你好"


@pytest.mark.anyio
async def test_rule_applies_only_while_its_text_is_in_the_request() -> None:
    question = Message("user", "你好")
    without = await reply(chat(question))
    assert without.message.content == "（mock）我听到了：你好"
    with_update = await reply(chat(memory_update(f"<persona>\n{OWL_RULE}\n</persona>"), question))
    assert with_update.message.content == "（mock）我听到了：你好 🦉"
    in_system = await reply(chat(question, system="<persona>\n- always end answers with 'over.'\n</persona>"))
    assert in_system.message.content == "（mock）我听到了：你好 over."
    said_only = await reply(
        chat(Message("user", "always end answers with 🦉"), Message("assistant", "ok"), question)
    )
    assert "🦉" not in said_only.message.content, "a rule the user merely said is not memory"


@pytest.mark.anyio
async def test_prefix_rules_and_reminder_blocks_inside_user_messages() -> None:
    block = "<system-reminder>\n- always start your replies with >>\n- end every answer with ✓.\n</system-reminder>"
    response = await reply(chat(Message("user", f"{block}\nstatus?")))
    assert response.message.content == ">> (mock) I heard: status? ✓"


@pytest.mark.anyio
async def test_remember_flow_commits_and_confirms_under_the_new_rule(tmp_path: Path) -> None:
    repo = await memory_repo(
        tmp_path, {"persona.md": "---\nname: persona\ndescription: Who I am.\n---\nI am reverie."}
    )
    user = Message("user", "设定：回答末尾总是加上 🦉")
    first = await reply(chat(user))
    assert first.finish_reason == "tool_calls" and first.message.content == ""
    (call,) = first.message.tool_calls
    assert call.name == "bash"
    command = json.loads(call.arguments)["command"]
    output = await run_bash(command, repo)
    assert output.strip().endswith("feat: update persona")
    persona = await AsyncPath(repo / "persona.md").read_text(encoding="utf-8")
    assert persona == f"---\nname: persona\ndescription: Who I am.\n---\nI am reverie.\n{OWL_RULE}\n"
    assert (await git(repo, "status", "--porcelain")) == ""
    assert (await git(repo, "rev-list", "--count", "HEAD")).strip() == "2"

    result = Message("tool", output, tool_call_id=call.id, name="bash")
    before_update = await reply(chat(user, first.message, result))
    assert before_update.message.content == CONFIRMATION_ZH
    after_update = await reply(chat(user, first.message, result, memory_update(persona)))
    assert after_update.message.content == f"{CONFIRMATION_ZH} 🦉"


@pytest.mark.anyio
async def test_user_facts_go_to_human_md_created_with_frontmatter(tmp_path: Path) -> None:
    repo = await memory_repo(tmp_path, {})
    response = await reply(
        chat(Message("user", "Remember that my name is O'Brien and I pay in $USD `daily`."))
    )
    command = json.loads(response.message.tool_calls[0].arguments)["command"]
    await run_bash(command, repo)
    human = await AsyncPath(repo / "human.md").read_text(encoding="utf-8")
    assert human == (
        "---\nname: human\ndescription: What I know about the user.\n---\n"
        "- my name is O'Brien and I pay in $USD `daily`\n"
    )
    assert (await git(repo, "log", "--format=%s")).strip() == "feat: update human"
    confirmation = Message(
        "tool", "abc1234 feat: update human", tool_call_id=response.message.tool_calls[0].id
    )
    final = await reply(
        chat(Message("user", "remember that my name is O'Brien"), response.message, confirmation)
    )
    assert final.message.content == CONFIRMATION


@pytest.mark.anyio
async def test_v1_layout_writes_under_system(tmp_path: Path) -> None:
    repo = await memory_repo(tmp_path, {})
    system = "<projection>$MEMORY_DIR/system/persona.md</projection>"
    response = await reply(chat(Message("user", "from now on, always end answers with !"), system=system))
    await run_bash(json.loads(response.message.tool_calls[0].arguments)["command"], repo)
    text = await AsyncPath(repo / "system" / "persona.md").read_text(encoding="utf-8")
    assert text.endswith("---\n- always end answers with !\n")


@pytest.mark.anyio
async def test_known_rule_and_missing_bash_do_not_call_tools() -> None:
    known = await reply(
        chat(Message("user", "remember: always end answers with 🦉"), system="- always end answers with 🦉")
    )
    assert known.message.tool_calls == () and known.message.content == "I already have that in memory. 🦉"
    no_bash = await reply(chat(Message("user", "remember: I like tea"), tools=()))
    assert (
        no_bash.message.tool_calls == () and no_bash.message.content == "(mock) I heard: remember: I like tea"
    )


@pytest.mark.anyio
async def test_failed_memory_command_is_reported() -> None:
    user = Message("user", "remember: I like tea")
    call = (await reply(chat(user))).message
    failed = Message(
        "tool", "fatal: not a git repository (exit code 128)", tool_call_id=call.tool_calls[0].id
    )
    answer = await reply(chat(user, call, failed))
    assert answer.message.content.startswith("I could not save that to memory: fatal: not a git repository")


@pytest.mark.anyio
async def test_recall_searches_then_quotes_the_best_hit() -> None:
    question = Message("user", "What did I say about the database migration?")
    first = await reply(chat(question, tools=(BASH, SEARCH)))
    (call,) = first.message.tool_calls
    assert call.name == "conversation_search"
    assert json.loads(call.arguments)["query"] == "database migration"
    hits = json.dumps(
        [
            {"message_type": "user_message", "content": "What did I say about the database migration?"},
            {"message_type": "user_message", "content": "The database migration must run before Friday."},
        ]
    )
    result = Message("tool", hits, tool_call_id=call.id, name="conversation_search")
    answer = await reply(chat(question, first.message, result, tools=(BASH, SEARCH)))
    assert answer.message.content == 'Earlier you said: "The database migration must run before Friday."'
    empty = Message("tool", "[]", tool_call_id=call.id)
    nothing = await reply(chat(question, first.message, empty, tools=(BASH, SEARCH)))
    assert nothing.message.content == "I found nothing about that earlier in our conversation."


@pytest.mark.anyio
async def test_tool_call_ids_are_derived_from_the_request() -> None:
    request = chat(Message("user", "remember: I like tea"))
    first, again = await reply(request), await ScriptedModel().complete(request)
    assert first.message.tool_calls[0].id == again.message.tool_calls[0].id
    assert first.message.tool_calls[0].id.startswith("call_")
    other = await reply(chat(Message("user", "remember: I like coffee")))
    assert other.message.tool_calls[0].id != first.message.tool_calls[0].id


TRANSCRIPT = (
    " \n[user] Please fix the crash in src/orchestrator/app.py, see https://github.com/acme/app/issues/42?x=1 and #123\n"
    '[assistant] Looking at it -> bash({"command": "git log --oneline -1"})\n'
    "[tool] 3f2a9c1d fix: earlier attempt\n"
    "[user] Also ticket ABC-12 and the config at ./conf/reverie.toml; error: TypeError at ~/x/y.py\n"
    "[assistant] Fixed it in commit 9fceb02 and 1f4d3e3e7a.\n \n. Generate the summary."
)


@pytest.mark.anyio
async def test_summary_keeps_identifiers_and_headings() -> None:
    request = ModelRequest(system="Summarize.", messages=(Message("user", TRANSCRIPT),), purpose="summarize")
    summary = (await reply(request)).message.content
    for identifier in (
        "src/orchestrator/app.py",
        "https://github.com/acme/app/issues/42?x=1",
        "#123",
        "ABC-12",
        "./conf/reverie.toml;",
        "~/x/y.py",
        "3f2a9c1d",
        "9fceb02",
        "1f4d3e3e7a",
    ):
        assert identifier in summary, identifier
    assert (
        summary.index("## High level goals")
        < summary.index("## Important details")
        < summary.index("## Lookup hints")
    )
    assert "Current state" not in summary
    assert "Please fix the crash in src/orchestrator/app.py" in summary
    assert "TypeError" in summary.split("## Errors and fixes")[1]
    full = ModelRequest(system="... ## Current state ...", messages=request.messages, purpose="summarize")
    assert "## Current state" in (await reply(full)).message.content
    assert summary == (await reply(request)).message.content, "deterministic"


@pytest.mark.anyio
async def test_summary_is_bounded_and_keeps_identifiers_first() -> None:
    lines = [
        f"[user] step {n}: please look at module_{n}/file_{n}.py and say something long enough"
        for n in range(200)
    ]
    request = ModelRequest(
        system="", messages=(Message("user", "\n".join(lines)),), purpose="summarize", max_tokens=300
    )
    summary = (await reply(request)).message.content
    assert len(summary) <= 1200
    assert "module_0/file_0.py" in summary and "module_20/file_20.py" in summary


@pytest.mark.anyio
async def test_summary_chain_does_not_grow_with_the_session() -> None:
    """A sliding session updates its previous summary at every compaction: the summary must stay the
    same size however long the session (the 10,000-turn soak's compactions fired ever more often while
    every commit hash ever seen piled up in it), while each evicted identifier is kept (C6) and the
    previous summary's newest ones are carried."""
    from orchestrator.compaction.transcript import render_transcript, summarizer_input

    summary = previous_commit = ""
    sizes: list[int] = []
    memory = "<human>\n"
    for n in range(1, 301):
        commit = f"b{n:06d}"
        memory += f"- I like soak-fact-{n}\n"
        evicted = (
            Message("user", f"message {n}: remember that I like soak-fact-{n}"),
            Message("assistant", "Saving it."),
            Message("tool", f"[main {commit}] remember soak-fact-{n}", tool_call_id=f"call-{n}"),
        )
        content = summarizer_input(
            render_transcript(evicted), previous_summary=summary or None, core_memory=memory + "</human>"
        )
        request = ModelRequest(system="Summarize.", messages=(Message("user", content),), purpose="summarize")
        summary = (await reply(request)).message.content
        assert commit in summary, n
        assert previous_commit in summary, n
        previous_commit = commit
        sizes.append(len(summary))
    assert sizes[-1] <= sizes[49] + 40, sizes[49::50]
    assert "soak-fact-1\n" not in summary, "core memory is not re-summarised (C9)"


def test_identifier_extraction() -> None:
    found = extract_identifiers(TRANSCRIPT)
    assert "https://github.com/acme/app/issues/42?x=1" in found and "#123" in found and "ABC-12" in found
    assert "3f2a9c1d" in found and "9fceb02" in found
    assert len(found) == len(set(found))
    assert extract_identifiers("nothing here at all") == ()


REFLECT_SYSTEM = "You are the reflection agent.\n<memory>\n<human>\n- I use pnpm\n</human>\n</memory>"


def reflect_request(*messages: Message) -> ModelRequest:
    return ModelRequest(system=REFLECT_SYSTEM, messages=messages, tools=(BASH,), purpose="reflect")


@pytest.mark.anyio
async def test_reflection_commits_new_items_once(tmp_path: Path) -> None:
    repo = await memory_repo(
        tmp_path, {"human.md": "---\nname: human\ndescription: The user.\n---\n- I use pnpm\n"}
    )
    transcript = "\n".join(
        [
            "Review this conversation. Remember: this instruction line is not a user line.",
            "[user] I use pnpm",
            "[assistant] ok",
            "[user] my name is Lu",
            "[user] from now on, always end answers with 🦉",
            "[assistant] remember: the assistant's own words are not the user's",
        ]
    )
    task = Message("user", transcript)
    first = await reply(reflect_request(task))
    (call,) = first.message.tool_calls
    output = await run_bash(json.loads(call.arguments)["command"], repo)
    assert "feat(reflection): remember 2 item(s) 🔮" in output
    assert (await git(repo, "rev-list", "--count", "HEAD")).strip() == "2"
    human = await AsyncPath(repo / "human.md").read_text(encoding="utf-8")
    persona = await AsyncPath(repo / "persona.md").read_text(encoding="utf-8")
    assert human.endswith("- I use pnpm\n- my name is Lu\n")
    assert persona.endswith("---\n- always end answers with 🦉\n")
    done = await reply(reflect_request(task, first.message, Message("tool", output, tool_call_id=call.id)))
    assert done.message.tool_calls == () and done.message.content.startswith("Reflection: saved new memory")


@pytest.mark.anyio
async def test_reflection_keeps_what_the_user_states_about_themselves() -> None:
    transcript = "\n".join(
        [
            "[user] I graduated with a degree in Business Administration. Can you suggest some careers?",
            "[assistant] I am an assistant and I like lists.",
            "[user] My daily commute is 45 minutes each way! What podcasts fit that?",
            "[user] Do I have time for a course? " + "I went to many places and " * 10 + "it was long.",
            "[user] The weather is nice today.",
        ]
    )
    response = await reply(reflect_request(Message("user", transcript)))
    (call,) = response.message.tool_calls
    command = json.loads(call.arguments)["command"]
    assert "- I graduated with a degree in Business Administration" in command
    assert "- My daily commute is 45 minutes each way" in command
    assert "assistant" not in command.split("&&")[0] and "podcasts" not in command and "weather" not in command
    assert "went to many places" not in command  # narration past the length cap is not a fact
    assert "remember 2 item(s)" in command


@pytest.mark.anyio
async def test_reflection_with_nothing_new_does_not_commit() -> None:
    records = json.dumps(
        [{"kind": "user", "text": "I use pnpm"}, {"kind": "assistant", "text": "my name is bot"}]
    )
    response = await reply(reflect_request(Message("user", records)))
    assert response.message.tool_calls == ()
    assert response.message.content == "Reflection: nothing new to remember."


@pytest.mark.anyio
async def test_explicit_script_then_rules_or_strict() -> None:
    seen: list[ModelRequest] = []

    def scripted(request: ModelRequest) -> ModelResponse:
        seen.append(request)
        return ModelResponse(Message("assistant", "from a callable"))

    model = ScriptedModel(script=[ModelResponse(Message("assistant", "first")), scripted])
    request = chat(Message("user", "hi"))
    assert (await model.complete(request)).message.content == "first"
    assert (await model.complete(request)).message.content == "from a callable"
    assert seen == [request]
    assert (await model.complete(request)).message.content == "(mock) I heard: hi"
    strict = ScriptedModel(script=[ModelResponse(Message("assistant", "only"))], strict=True)
    await strict.complete(request)
    with pytest.raises(ModelError, match="no scripted response left"):
        await strict.complete(request)


@pytest.mark.anyio
async def test_streams_text_and_estimates_usage() -> None:
    pieces: list[str] = []

    async def sink(text: str) -> None:
        pieces.append(text)

    response = await ScriptedModel(latency=0.001).complete(
        chat(Message("user", "one two three " * 10)), on_text=sink
    )
    assert "".join(pieces) == response.message.content and len(pieces) > 5
    assert response.usage.prompt_tokens > 0 and response.usage.completion_tokens > 0
    assert response.usage != Usage()


_RULE_TEXT = st.text(
    alphabet=st.characters(blacklist_categories=("Cc", "Cs", "Zl", "Zp"), blacklist_characters="\x85"),
    min_size=1,
    max_size=40,
).filter(lambda s: s.strip() != "")


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(rule=_RULE_TEXT)
def test_remember_command_survives_any_rule_text(rule: str) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        repo = Path(tmp)
        subprocess.run(["git", "init", "-q", str(repo)], check=True)
        env = {**os.environ, "MEMORY_DIR": str(repo)}
        subprocess.run(["bash", "-c", remember_command(rule)], check=True, env=env, capture_output=True)
        written = next(repo.glob("*.md")).read_text(encoding="utf-8")
        assert written.splitlines()[-1] == "- " + " ".join(rule.split())
        log = subprocess.run(
            ["git", "-C", str(repo), "log", "--format=%s"], check=True, capture_output=True, text=True
        )
        assert log.stdout.strip() in ("feat: update persona", "feat: update human")

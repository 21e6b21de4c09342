"""``reverie prompt | history | search | reflect``: look at what an agent has seen, reflect now."""

from __future__ import annotations

import json
import sys
from functools import partial
from typing import Annotated, Any

import typer

from orchestrator.base import blocking
from orchestrator.base.paths import DEFAULT_AGENT_ID, agent_memory_dir, check_agent_id
from orchestrator.cli.aio import run_async
from orchestrator.cli.errors import UserError
from orchestrator.cli.home import known_agents_on_disk
from orchestrator.cli.listing import conversation_lines
from orchestrator.cli.options import AgentOption, ConversationOption
from orchestrator.cli.render import TerminalRenderer, one_line
from orchestrator.memfs.compiler import compile_system_prompt
from orchestrator.memfs.gitdir import is_repository
from orchestrator.store import Store

__all__ = [
    "history",
    "prompt_cmd",
    "reflect",
    "register",
    "require_agent",
    "require_agent_in_home",
    "run_async",
    "search",
]


async def require_agent(store: Any, agent_id: str) -> None:
    """Refuse an agent that does not exist yet: only ``chat`` creates agents, so a typo in
    ``--agent`` cannot leave a new agent, memory repository and conversation behind."""
    check_agent_id(agent_id)
    record = await store.get_agent(agent_id)
    has_repo = await blocking.run_sync("files", partial(is_repository, agent_memory_dir(agent_id)))
    if record is None and not has_repo:
        on_disk = await blocking.run_sync("files", known_agents_on_disk)
        known = sorted({a.id for a in await store.list_agents()} | set(on_disk))
        listing = f" (agents: {', '.join(known)})" if known else " (no agents yet)"
        raise UserError(f"no agent {agent_id!r}{listing}; `reverie chat --agent {agent_id}` creates it")


async def require_agent_in_home(agent_id: str) -> None:
    """:func:`require_agent` against this home's store, for commands that open their own session."""

    async with Store.opened() as store:
        await require_agent(store, agent_id)


async def _existing_agent(rt: Any, agent_id: str) -> Any:
    await require_agent(rt.store, agent_id)
    return await rt.agent(agent_id, create=False)


async def _existing_conversation(rt: Any, profile: Any, conversation_id: str | None) -> Any:
    """``--conversation`` (checked), else the agent's latest, else None: nothing is created."""
    if conversation_id:
        return await rt.conversation(profile, conversation_id=conversation_id)
    return await rt.store.latest_conversation(profile.agent_id)


def _print_conversations(agent: str, summaries: Any, as_json: bool) -> None:
    if as_json:
        rows = [
            {"id": s.conversation.id, "created_at": s.conversation.created_at, "title": s.conversation.title,
             "messages": s.messages, "last_activity": s.last_activity, "first_message": s.first_message}
            for s in summaries
        ]
        print(json.dumps(rows, ensure_ascii=False, indent=2))
        return
    if not summaries:
        print(f"agent {agent!r} has no conversations yet", file=sys.stderr)
    for line in conversation_lines(summaries):
        print(line)


def prompt_cmd(
    agent: AgentOption = DEFAULT_AGENT_ID,
    conversation: ConversationOption = None,
    fresh: Annotated[bool, typer.Option("--fresh", help="Compile from the committed memory now instead of the cache.")] = False,
) -> None:
    """Print the system prompt the conversation uses (its cached compile), or a fresh compile."""
    # lazy: `reverie --help` imports every command module (cli/app.py)
    from orchestrator.runtime.runtime import Runtime

    async def main() -> tuple[str, str]:
        async with Runtime.open() as rt:
            profile = await _existing_agent(rt, agent)
            if fresh and conversation:
                await rt.conversation(profile, conversation_id=conversation)
            if not fresh:
                conv = await _existing_conversation(rt, profile, conversation)
                row = await rt.store.get_prompt(conv.id) if conv is not None else None
                if row is not None:
                    # like the seed: the revision the model was last told of (a <memory_update> moves it),
                    # while the content stays as first compiled
                    sha = (row.memfs_revision or "none")[:7]
                    return f"[cached · compiled {row.compiled_at} · memfs {sha}]", row.content
                what = "this conversation has" if conv is not None else f"agent {agent!r} has no conversation, so"
                print(f"({what} no cached prompt yet; compiling fresh)", file=sys.stderr)
            if not await blocking.run_sync("files", partial(is_repository, profile.memory_dir)):
                raise UserError(f"agent {agent!r} has no memory repository at {profile.memory_dir}")
            compiled = await blocking.run_sync("git", partial(compile_system_prompt, profile.memory_dir, profile.raw_system, agent_id=profile.agent_id))
            sha = (compiled.memfs_revision or "none")[:7]
            return f"[fresh · compiled {compiled.compiled_at} · memfs {sha}]", compiled.content

    header, content = run_async(main)
    print(header, file=sys.stderr)
    sys.stdout.write(content if content.endswith("\n") else content + "\n")


def history(
    agent: AgentOption = DEFAULT_AGENT_ID,
    conversation: ConversationOption = None,
    as_json: Annotated[bool, typer.Option("--json", help="One JSON array of every stored message.")] = False,
    list_conversations: Annotated[bool, typer.Option("--list", help="List the agent's conversations instead.")] = False,
) -> None:
    """Show a conversation's whole durable transcript (evicted messages included), numbered from 1 in each conversation."""
    # lazy: `reverie --help` imports every command module (cli/app.py)
    from orchestrator.runtime.runtime import Runtime

    async def main() -> Any:
        async with Runtime.open() as rt:
            profile = await _existing_agent(rt, agent)
            if list_conversations:
                return await rt.store.conversation_summaries(profile.agent_id)
            conv = await _existing_conversation(rt, profile, conversation)
            if conv is None:
                return []
            in_context = {m.id for m in await rt.store.in_context(conv.id)}
            status = {t.id: t.status for t in await rt.store.turns(conv.id)}
            return [
                {
                    "id": m.id,
                    "number": number,
                    "seq": m.seq,
                    "conversation_id": m.conversation_id,
                    "role": m.message.role,
                    "kind": m.message.kind,
                    "content": m.message.content,
                    "tool_calls": [
                        {"id": c.id, "name": c.name, "arguments": c.arguments} for c in m.message.tool_calls
                    ],
                    "tool_call_id": m.message.tool_call_id,
                    "name": m.message.name,
                    "created_at": m.created_at,
                    "in_context": m.id in in_context,
                    "turn_id": m.turn_id,
                    "turn_status": status.get(m.turn_id) if m.turn_id else None,
                    "metadata": dict(m.metadata),
                }
                for number, m in enumerate(await rt.store.transcript(conv.id), start=1)
            ]

    rows = run_async(main)
    if list_conversations:
        _print_conversations(agent, rows, as_json)
        return
    if as_json:
        print(json.dumps(rows, ensure_ascii=False, indent=2))
        return
    if not rows:
        what = "conversations" if list_conversations else "messages"
        print(f"agent {agent!r} has no {what} yet", file=sys.stderr)
    for index, row in enumerate(rows):
        marker = " " if row["in_context"] else "·"
        label = row["kind"] if row["kind"] != "message" else row["role"]
        if row["metadata"].get("interrupted"):
            label += " (interrupted)"
        text = row["content"]
        if row["tool_calls"]:
            text += " ".join(f"⚙ {c['name']}({c['arguments']})" for c in row["tool_calls"])
        print(f"{marker}[{row['number']}] {label}: {text}")
        later = rows[index + 1]["turn_id"] if index + 1 < len(rows) else None
        if row["turn_status"] == "interrupted" and later != row["turn_id"]:
            print("  ⏹ turn interrupted (Ctrl-C): what was streamed is kept")


def search(
    query: Annotated[str, typer.Argument(help="Words or \"a phrase\"; every term must occur.")],
    agent: AgentOption = DEFAULT_AGENT_ID,
    conversation: ConversationOption = None,
    limit: Annotated[int, typer.Option("--limit", "-n", min=1, max=1000, help="Most results to show, best first.")] = 20,
    as_json: Annotated[bool, typer.Option("--json", help="Print the results as JSON.")] = False,
) -> None:
    """Search everything the agent's conversations ever held (FTS5, BM25), evicted messages included."""
    # lazy: `reverie --help` imports every command module (cli/app.py)
    from orchestrator.runtime.runtime import Runtime

    if not query.strip():
        raise UserError("the search query is empty: give words or \"a phrase\"")

    async def main() -> list[dict[str, Any]]:
        async with Runtime.open() as rt:
            profile = await _existing_agent(rt, agent)
            if conversation:
                await rt.conversation(profile, conversation_id=conversation)
            hits = await rt.store.search(
                query, agent_id=profile.agent_id, conversation_id=conversation, limit=limit
            )
            return [h.as_dict() for h in hits]

    results = run_async(main)
    if as_json:
        print(json.dumps(results, ensure_ascii=False, indent=2))
        return
    if not results:
        print(f"no messages match {query!r}")
    for hit in results:
        text = hit.get("content") or hit.get("reasoning") or hit.get("tool_return") or json.dumps(hit, ensure_ascii=False)
        print(f"{hit['created_at']}  {hit.get('message_type', '')}  {one_line(str(text), 200)}")


def reflect(
    agent: AgentOption = DEFAULT_AGENT_ID,
    conversation: ConversationOption = None,
) -> None:
    """Reflect on the conversation now (ignores the trigger and a failure pause) and wait for the merge."""
    # lazy: `reverie --help` imports every command module (cli/app.py)
    from orchestrator.app.session import ChatSession

    renderer = TerminalRenderer()
    renderer.quiet_outcomes = True

    async def main() -> str:
        await require_agent_in_home(agent)
        async with ChatSession.open(agent_id=agent, conversation_id=conversation, observer=renderer) as session:
            before = {r.id for r in await session.runtime.store.reflections(agent)}
            reason = await session.reflect_now()
            await session.supervisor.drain()
            launched = [r for r in await session.runtime.store.reflections(agent) if r.id not in before]
            if not launched:
                return f"not started: {reason}"
            record = launched[-1]
            return f"{record.status} ({record.reason})" if record.reason else record.status

    result = run_async(main)
    renderer.finish()
    print(f"reflection: {result}")


def register(app: typer.Typer) -> None:
    app.command("prompt")(prompt_cmd)
    app.command("history")(history)
    app.command("search")(search)
    app.command("reflect")(reflect)

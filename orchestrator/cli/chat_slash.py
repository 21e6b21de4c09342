"""The chat's slash commands: handled in the CLI, never sent to the model.

``COMMANDS`` is the one list: ``/help`` prints it and the tests check that every entry answers.
The agent-info reminder tells the model the user can ``/rename`` (D7) and
``/description``; both are true here. An unknown ``/word`` gets a one-line hint; text that merely starts with ``//`` or a path such
as ``/etc/hosts is odd`` is sent to the model like any message.
"""

from __future__ import annotations

import difflib
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from functools import partial
from pathlib import Path

from orchestrator.app.memory_history import LogFilter, kept_lines_notes, memory_changes, undo_changes
from orchestrator.app.session import ChatSession
from orchestrator.app.usage import PARTS, Tally, limit_lines
from orchestrator.base import blocking
from orchestrator.base.errors import UsageError
from orchestrator.cli.listing import conversation_lines
from orchestrator.cli.memory_diff import memory_diff
from orchestrator.cli.memory_log import format_change
from orchestrator.cli.render import compaction_line, one_line
from orchestrator.memfs.gittrees import TreeTooLarge
from orchestrator.memfs.history import recent_commits, tracked_files
from orchestrator.memfs.undo import UndoError
from orchestrator.memfs.worktrees import list_reflections

__all__ = ["COMMANDS", "KEYS", "Slash", "SlashCommand", "is_slash"]


@dataclass(frozen=True)
class SlashCommand:
    """A REPL command as ``/help`` lists it."""

    name: str
    usage: str
    help: str


COMMANDS: tuple[SlashCommand, ...] = (
    SlashCommand("help", "/help", "list these commands and the keys"),
    SlashCommand("status", "/status", "agent, conversation, model, context use, memory HEAD, subagents, kept branches"),
    SlashCommand("memory", "/memory [log]", "the memory tree and the last memory commits with a short diff; log: the last changes, who made them and why"),
    SlashCommand("undo", "/undo [REV]", "show the last memory change and how to take it back; with its id, take it back (a new commit)"),
    SlashCommand("cost", "/cost", "model calls, tokens and cost: this session and this conversation, main agent and subagents apart"),
    SlashCommand("compact", "/compact", "compact the conversation now"),
    SlashCommand("reflect", "/reflect", "start a reflection now (it merges in the background)"),
    SlashCommand("reflections", "/reflections", "recent reflections and their outcomes"),
    SlashCommand("new", "/new", "start a new conversation"),
    SlashCommand("conversations", "/conversations [ID]", "list this agent's conversations, or switch to one"),
    SlashCommand("model", "/model [NAME]", "show the model, or use NAME from the next request on"),
    SlashCommand("rename", "/rename NAME", "rename the agent"),
    SlashCommand("description", "/description TEXT", "describe the agent (the model is told from its next conversation on)"),
    SlashCommand("exit", "/exit", "leave (Ctrl-D does too)"),
)
_NAMES = {c.name for c in COMMANDS} | {"quit"}

KEYS = (
    "Enter sends · Alt-Enter or a trailing \\ adds a line · Ctrl-C interrupts a turn or clears the line · "
    "Ctrl-D or /exit leaves"
)


def is_slash(text: str) -> bool:
    """``/word …`` is a command; ``//…`` and ``/a/path …`` are messages."""
    stripped = text.strip()
    if not stripped.startswith("/") or stripped.startswith("//"):
        return False
    word = stripped[1:].split(maxsplit=1)[0] if len(stripped) > 1 else ""
    return "/" not in word


class Slash:
    """Runs slash commands against a session, printing with ``say``."""

    def __init__(self, session: ChatSession, say: Callable[[str], None], *, since: int = 0) -> None:
        self.session = session
        self.say = say
        self.since = since
        """The newest event id when the session opened: ``/cost``'s session totals count what came after."""

    async def run(self, text: str) -> bool:
        """Handle one command line; True when the REPL should leave."""
        word, _, rest = text.strip()[1:].partition(" ")
        name, arg = word.lower(), rest.strip()
        if name in {"exit", "quit"}:
            return True
        if name not in _NAMES:
            near = difflib.get_close_matches(name, sorted(_NAMES), n=1, cutoff=0.5)
            hint = f"did you mean /{near[0]}? " if near else ""
            self.say(f"unknown command /{word}; {hint}/help lists the commands")
            return False
        handler: Callable[[str], Awaitable[None]] = getattr(self, f"_{name}")
        await handler(arg)
        return False

    async def _help(self, arg: str) -> None:
        width = max(len(c.usage) for c in COMMANDS)
        lines = [f"  {c.usage.ljust(width)}  {c.help}" for c in COMMANDS]
        self.say("\n".join(["commands:", *lines, f"keys: {KEYS}"]))

    async def _status(self, arg: str) -> None:
        s = self.session
        use = await s.context_use()
        head = await s.memory_head()
        kept = await self._kept_branches()
        percent = f" ({100 * use.tokens / use.window:.0f}%)" if use.window else ""
        model = s.model_name if s.settings.uses_endpoint else "scripted (the embedded model)"
        if not s.settings.uses_endpoint and s.model_name != "scripted":
            model += f"; requests name {s.model_name}"
        self.say(
            "\n".join(
                [
                    f"agent         {s.agent.agent_id} ({s.agent.name})",
                    f"conversation  {s.conversation_id}",
                    f"model         {model}",
                    f"context       {use.tokens} / {use.window} tokens{percent}, {use.source}",
                    f"memory HEAD   {head[:12] if head else '(no commits)'}  {s.agent.memory_dir}",
                    f"subagents     {s.supervisor.running} running",
                    f"kept branches {', '.join(kept) if kept else 'none'}",
                ]
            )
        )

    async def _kept_branches(self) -> list[str]:
        try:
            branches = await list_reflections(self.session.agent.memory_dir, kind=None)
        except Exception as exc:  # a damaged repository must not break /status
            return [f"(cannot list: {one_line(str(exc), 80)})"]
        return [b.branch for b in branches if not b.merged]

    async def _memory(self, arg: str) -> None:
        if arg.split()[:1] == ["log"]:
            await self._memory_log()
            return
        lines = await blocking.run_sync("git", partial(_memory_report, self.session.agent.memory_dir))
        self.say("\n".join(lines))

    async def _memory_log(self) -> None:
        found = await memory_changes(self.session.agent.memory_dir, LogFilter(count=10))
        if not found:
            self.say("no memory changes yet")
            return
        self.say("\n".join(["memory changes (newest first):", *(format_change(c) for c in found)]))

    async def _undo(self, arg: str) -> None:
        """Without an id: the last change, its diff and the line that takes it back (asking first);
        with one: take it back (a reflection's change as a whole) as a new commit."""
        repo = self.session.agent.memory_dir
        found = await memory_changes(repo, LogFilter(count=1))
        last = found[0] if found else None
        if not arg:
            if last is None:
                self.say("no memory changes to undo")
                return
            diff = await blocking.run_sync("git", partial(memory_diff, repo, f"{last.commits[-1]}~1", last.commit, max_lines=20))
            whole = f" (reflection {last.provenance.reflection}: all {len(last.commits)} commits)" if len(last.commits) > 1 else ""
            self.say("\n".join([
                f"last change: {last.commit[:7]} {last.provenance.source}  {last.subject}",
                *(diff.render() if diff is not None else []),
                f"take it back with /undo {last.commit[:7]}{whole}",
            ]))
            return
        reflection = last.provenance.reflection if last is not None and last.commit.startswith(arg) else None
        try:
            outcome = await undo_changes(
                repo, agent_id=self.session.agent.agent_id, revision=None if reflection else arg,
                reflection=reflection, resolver=self.session.resolver,
            )
        except UndoError as error:
            self.say(str(error))
            return
        for merged in outcome.merges:
            if merged.in_head:
                self.say(f"undone: new commit {', '.join(c[:7] for c in merged.commits)}; the next turn sees it as a memory update")
            else:
                self.say(f"undo kept on branch {merged.branch}: {merged.reason or merged.status} (/status lists kept branches)")
        for note in kept_lines_notes(outcome):
            self.say(f"⚠ {note}")

    async def _compact(self, arg: str) -> None:
        try:
            result = await self.session.compact()
        except UsageError as exc:
            self.say(str(exc))
            return
        self.say(compaction_line(result))

    async def _cost(self, arg: str) -> None:
        s = self.session
        splits = {
            "this session": await s.usage(after_id=self.since),
            "this conversation": await s.usage(conversation=True),
        }
        money = s.cost(Tally()) is not None
        header = f"{'':18}{'calls':>7}{'tokens in':>13}{'tokens out':>12}"
        lines = [header + (f"{'cost':>11}" if money else "")]
        for title, split in splits.items():
            lines.append(title)
            parts = [(f"  {label}", split.parts[label]) for label in PARTS.values() if label != "main agent"]
            for label, tally in (("main agent", split.agent), ("subagents", split.subagents), ("total", split.total), *parts):
                cost = s.cost(tally)
                shown = f"{'$' + format(cost, '.4f'):>11}" if cost is not None else ""
                lines.append(
                    f"  {label:16}{tally.calls:>7,}{tally.prompt_tokens:>13,}{tally.completion_tokens:>12,}{shown}"
                )
        meter = s.context.meter
        lines.extend(limit_lines(s.settings, meter.report() if meter is not None else {}))
        if not money:
            lines.append("no prices configured: set [model] price_in and price_out (USD per million tokens) to see cost")
        self.say("\n".join(lines))

    async def _reflect(self, arg: str) -> None:
        # one already running (an automatic one) is not this command's: say so rather than "started"
        reflection = self.session.reflection
        already = reflection is not None and reflection.active
        try:
            reason = await self.session.reflect_now()
        except UsageError as exc:
            self.say(str(exc))
            return
        if not already and reflection is not None and reflection.active:
            self.say("reflection started; a line with its outcome follows when it finishes")
        else:
            self.say(f"reflection not started: {reason}")

    async def _reflections(self, arg: str) -> None:
        records = await self.session.runtime.store.reflections(self.session.agent.agent_id)
        if not records:
            self.say("no reflections yet (/reflect starts one)")
            return
        lines = []
        for r in records[-8:]:
            why = f": {one_line(r.reason, 80)}" if r.reason else ""
            files = f" [{', '.join(r.files)}]" if r.files else ""
            lines.append(f"  {r.created_at}  {r.id}  {r.status}{why}{files}")
        self.say("\n".join(["reflections (newest last):", *lines]))

    async def _new(self, arg: str) -> None:
        conversation = await self.session.new_conversation()
        self.say(f"new conversation {conversation}")

    async def _conversations(self, arg: str) -> None:
        if arg:
            conversation = await self.session.resume_conversation(arg)
            self.say(f"now in conversation {conversation}")
            return
        summaries = await self.session.runtime.store.conversation_summaries(self.session.agent.agent_id)
        lines = conversation_lines(summaries, self.session.conversation_id)
        self.say("\n".join([*lines, "(/conversations ID switches; a unique start of the id is enough)"]))

    async def _model(self, arg: str) -> None:
        s = self.session
        if not arg:
            where = "endpoint " + str(s.settings.base_url) if s.settings.uses_endpoint else "embedded"
            self.say(f"model {s.model_name} ({where})")
            return
        if not s.settings.uses_endpoint:
            self.say(
                f"no endpoint is configured, so the embedded scripted model answers; set REVERIE_BASE_URL "
                f"(or model.base_url) to use {arg}"
            )
            return
        await s.set_model(arg)
        self.say(f"model {arg} from the next request on (kept for agent {s.agent.agent_id})")

    async def _rename(self, arg: str) -> None:
        name = " ".join(arg.split())
        if not name:
            self.say("usage: /rename NAME")
            return
        await self.session.rename(name)
        self.say(f"agent {self.session.agent.agent_id} is now called {name}")


    async def _description(self, arg: str) -> None:
        text = " ".join(arg.split())
        if not text:
            self.say(f"description: {self.session.agent.description or '(none)'}; /description TEXT sets it")
            return
        await self.session.describe(text)
        self.say(f"agent {self.session.agent.agent_id} is described as: {text}")


def _memory_report(repo: Path, commits: int = 3) -> list[str]:
    """The tree of tracked files at HEAD and the last commits, each with a compact diff (a HEAD over
    a tree cap is named in one line instead of its files)."""
    try:
        listed = tracked_files(repo)
    except TreeTooLarge as over:
        return [f"memory {repo}: {over}"]
    if listed is None:
        return [f"memory {repo}: no commits yet"]
    lines = [f"memory {repo}"]
    seen: set[str] = set()
    for path in listed:
        parts = path.split("/")
        for depth in range(len(parts) - 1):
            folder = "/".join(parts[: depth + 1])
            if folder not in seen:
                seen.add(folder)
                lines.append(f"  {'  ' * depth}{parts[depth]}/")
        lines.append(f"  {'  ' * (len(parts) - 1)}{parts[-1]}")
    entries = recent_commits(repo, commits)
    if entries:
        lines.append("last commits:")
    for entry in entries:
        diff = memory_diff(repo, entry.parent, entry.commit, max_lines=4)
        summary = f"  ({diff.summary})" if diff is not None and diff.files else ""
        lines.append(f"  {entry.commit[:7]} {one_line(entry.subject, 80)}{summary}")
        if diff is not None:
            lines.extend(diff.render("      "))
    return lines

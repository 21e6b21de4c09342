"""How a running turn looks in a terminal: streamed text, one line per tool call, memory and
subagent notices.

The renderer is an ``Observer`` of turn events; it keeps track of whether the cursor is at the
start of a line so tool lines never glue onto streamed text. A tool call is one line naming the
tool and its main argument (``⚙ bash  git commit -m "…"``; ``verbose`` shows the raw JSON), its
result ``✓``/``✗`` with a short preview. On a terminal both previews are cut to its width (asked
at every line, counted in cells: a CJK character takes two), so a long command never wraps onto
a second line; off a terminal they keep their fixed lengths. Reflection merges name the files they changed with a
compact diff. Lines that may arrive while the user types (background subagents) go through
``above``, which the REPL points at its line editor so they are printed above the prompt. A
post-turn memory sync that finds the repository in trouble is shown too: the agent gets a
reminder, and the user should know why. Every reflection's outcome is shown, ``no_changes``
included, so a reflection that ran is never invisible.

Streamed text goes to ``out``; every other line (tools, memory, subagents) to ``activity``, which
is ``out`` in the REPL and stderr in headless ``text`` output, so a script that reads stdout gets
the reply alone. When the two are different streams but the same terminal, a line of activity
first ends the reply's line on ``out`` so the two never glue together. With ``reply_only`` (headless
``text`` to a pipe or a file) a step's text is held until its ``model.call`` says whether tool calls
follow: text that ends the turn goes to ``out`` then, before the post-turn work; text said before a
tool call is commentary and goes to ``activity``.
"""

from __future__ import annotations

import json
import os
import sys
import unicodedata
from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, TextIO

from orchestrator.base import blocking
from orchestrator.base.events import (
    Event,
    LockWaiting,
    MemoryCommitted,
    MemoryUpdateInjected,
    ModelCalled,
    ModelRetrying,
    ReminderQueued,
    TextDelta,
    ToolFinished,
    ToolStarted,
    TurnStarted,
)

if TYPE_CHECKING:
    from orchestrator.base.subagent_events import ReflectionAwaitingReview
    from orchestrator.compaction.result import CompactionResult

__all__ = [
    "TerminalRenderer",
    "clip",
    "compacted_line",
    "compaction_line",
    "one_line",
    "review_line",
    "terminal_columns",
    "tool_line",
]


def one_line(text: str, limit: int = 160) -> str:
    flat = " ".join(text.split())
    return flat if len(flat) <= limit else flat[: limit - 1] + "…"


def _cell(char: str) -> int:
    if unicodedata.combining(char):
        return 0
    return 2 if unicodedata.east_asian_width(char) in ("W", "F") else 1


def _cells(text: str) -> int:
    return sum(_cell(c) for c in text)


def clip(text: str, cells: int) -> str:
    """``text`` (one line) in at most ``cells`` terminal cells, ending in ``…`` when cut."""
    if _cells(text) <= cells:
        return text
    kept, used = [], 0
    for char in text:
        used += _cell(char)
        if used > cells - 1:
            break
        kept.append(char)
    return "".join(kept) + "…" if cells > 0 else ""


def terminal_columns(stream: TextIO) -> int | None:
    """The width of the terminal ``stream`` writes to; None when it is not one."""
    try:
        return os.get_terminal_size(stream.fileno()).columns if stream.isatty() else None
    except (AttributeError, OSError, ValueError):
        return None


_SYNC_TROUBLE = {
    "conflict": "has a rebase or merge stopped half-way (details: `reverie memory validate`)",
    "dirty": "has uncommitted changes (see `git status` in `reverie memory path`)",
    "invalid": "has a HEAD that fails validation (details: `reverie memory validate --head`)",
    "push_failed": "could not be pushed",
}
# the argument that says what a call does, per tool
_MAIN_ARGUMENT = {
    "bash": "command",
    "read_file": "path",
    "write_file": "path",
    "edit_file": "path",
    "conversation_search": "query",
    "search": "query",
}


_HELD_FIX = {
    "dirty": "commit or discard them (`git status` in `reverie memory path`) and reflection resumes at the next turn end",
    "conflict": "finish or abort it (`reverie memory validate`) and reflection resumes at the next turn end",
}


def compacted_line(evicted: int, tokens_before: int, tokens_after: int) -> str:
    """The same words the chat renderer prints for a ``compaction.done`` event."""
    return f"↻ compacted {evicted} messages ({tokens_before} → {tokens_after} tokens)"


def compaction_line(result: CompactionResult) -> str:
    """A manual compaction's one line (``/compact`` and ``reverie compact``; the renderer leaves
    manual compactions' events to this line, so it is printed once)."""
    if result.status == "skipped" and result.error:
        return f"nothing to compact: {result.error}"
    if result.status == "skipped":
        return f"nothing to compact ({result.messages_before} messages in context)"
    if result.status == "error":
        return f"compaction failed, the context is unchanged: {result.error}"
    line = compacted_line(result.evicted, result.tokens_before, result.tokens_after)
    if result.status == "failed":
        return f"{line} without a summary: the summarizer failed ({result.error})"
    return line


def review_line(event: ReflectionAwaitingReview) -> str:
    """V1's line for a held reflection: its commits, files with lines added and removed, and the
    command that shows it."""
    n = event.commits
    files = ", ".join(f"{path} +{added} -{removed}" for path, added, removed in event.files) or "no file changes"
    return (
        f"reflection awaits review: {n} commit{'s' if n != 1 else ''} ({files}); "
        f"`reverie reflections show {event.reflection_id}`, then merge or discard"
    )


def _manual(event: Event) -> bool:
    """A compaction the user asked for (its command prints the result)."""
    stats = getattr(event, "stats", None)
    trigger = stats.get("trigger") if isinstance(stats, dict) else getattr(event, "trigger", "")
    return trigger == "manual"


def _compact_args(arguments: str) -> str:
    try:
        return json.dumps(json.loads(arguments), ensure_ascii=False, separators=(",", ":"))
    except ValueError:
        return arguments


def tool_line(name: str, arguments: str, *, verbose: bool = False, limit: int = 120, width: int | None = None) -> str:
    """``⚙ name  what-it-does`` on one line, the main argument cut at ``limit`` cells, or to leave
    the line ``width`` cells in all; the raw arguments with ``verbose``."""
    if verbose:
        return f"⚙ {name}  {_compact_args(arguments)}"
    main, more = _what(name, arguments)
    head = f"⚙ {name}  "
    if width is not None:
        limit = min(limit, max(8, width - _cells(head) - _cells(more)))
    line = f"{head}{clip(' '.join(main.split()), limit)}{more}".rstrip()
    return line if width is None else clip(line, width)


def _what(name: str, arguments: str) -> tuple[str, str]:
    """What a call does (its main argument, else every argument briefly) and the other keys' names."""
    try:
        parsed = json.loads(arguments) if arguments.strip() else {}
    except ValueError:
        return arguments, ""
    if not isinstance(parsed, dict):
        return arguments, ""
    key = _MAIN_ARGUMENT.get(name)
    if key and isinstance(parsed.get(key), str):
        rest = [k for k in parsed if k != key]
        return parsed[key], f"  (+{', '.join(rest)})" if rest and name != "bash" else ""
    return " ".join(f"{k}={one_line(v if isinstance(v, str) else json.dumps(v, ensure_ascii=False), 40)}" for k, v in parsed.items()), ""


class TerminalRenderer:
    def __init__(
        self,
        out: TextIO | None = None,
        *,
        verbose: bool = False,
        memory_dir: Path | None = None,
        above: Callable[[str], bool] | None = None,
        activity: TextIO | None = None,
        reply_only: bool = False,
        columns: Callable[[], int | None] | None = None,
    ) -> None:
        self.out = out or sys.stdout
        self.activity = activity or self.out
        self.columns = columns or partial(terminal_columns, self.activity)
        """The terminal's width now (None off a terminal): tool previews are fitted to it."""
        self.reply_only = reply_only
        self._held = ""
        self.memory_changes = False
        """The REPL shows each memory commit (V2): the turn's own with its diff, another process's
        named as such; a reflection's is shown by its merge line."""
        self.quiet_outcomes = False
        """``reverie reflect`` prints the outcome itself: no ``no_changes`` or ``pending`` line here."""
        self.verbose = verbose
        self.memory_dir = memory_dir
        self.above = above
        self.turn_id: str | None = None
        self.streamed = ""
        self._at_line_start = True

    def _line(self, text: str) -> None:
        if not self._at_line_start:
            self.out.write("\n")
            self.out.flush()
            self._at_line_start = True
        self.activity.write(text + "\n")
        self.activity.flush()

    def notice(self, text: str) -> None:
        """A line that may come while the user types: above the prompt when one is shown."""
        if self.above is not None and self.above(text):
            return
        self._line(text)

    def _release(self, to_out: bool) -> None:
        """The held text of a step: the reply on ``out``, or commentary before a tool call on ``activity``."""
        held, self._held = self._held, ""
        if not held.strip():
            return
        if to_out:
            self.out.write(held)
            self._at_line_start = held.endswith("\n")
            self.out.flush()
        else:
            self._line("  " + one_line(held, 400))

    def finish(self) -> None:
        self._release(True)
        if not self._at_line_start:
            self.out.write("\n")
            self._at_line_start = True
        self.out.flush()

    async def __call__(self, event: Event) -> None:
        if isinstance(event, TextDelta):
            if event.text and self.reply_only:
                self.streamed += event.text
                self._held += event.text
            elif event.text:
                self.streamed += event.text
                self.out.write(event.text)
                self._at_line_start = event.text.endswith("\n")
                self.out.flush()
        elif isinstance(event, ModelCalled) and event.purpose == "chat" and self.reply_only:
            self._release(event.tool_calls == 0)
        elif isinstance(event, TurnStarted):
            self.turn_id = event.turn_id
            self.streamed = ""
        elif isinstance(event, ToolStarted):
            width = None if self.verbose else self.columns()
            room = None if width is None else width - 2
            self._line(f"  {tool_line(event.name, event.arguments, verbose=self.verbose, width=room)}")
        elif isinstance(event, ToolFinished):
            mark = "✓" if event.ok else "✗"
            preview = one_line(event.output, 400 if self.verbose else 100)
            width = None if self.verbose else self.columns()
            if width is not None:
                preview = clip(preview, width - 4)
            self._line(f"  {mark} {preview or '(no output)'}")
        elif isinstance(event, ModelRetrying):
            self._line(f"  ⚠ model: {event.message}")
        elif isinstance(event, LockWaiting):
            self.notice(f"  ⏳ {event.message}")
        elif isinstance(event, MemoryCommitted) and self.memory_changes:
            await self._memory_commit(event)
        elif isinstance(event, MemoryUpdateInjected):
            self._line("  ↻ memory changed — <memory_update> injected")
        elif isinstance(event, ReminderQueued) and event.status in _SYNC_TROUBLE:
            self._line(f"  ⚠ memory repository {_SYNC_TROUBLE[event.status]}; the agent is asked to fix it")
        elif event.kind.startswith(("compaction.", "reflection.")):
            await self._subagent(event)

    async def _subagent(self, event: Event) -> None:
        """Compaction's and reflection's events, whose classes load with the first one shown."""
        # deferred: see the docstring (a chat's first request waits for neither subagent)
        from orchestrator.base.subagent_events import (
            CompactionDone,
            CompactionFailed,
            CompactionProgress,
            ReflectionAwaitingReview,
            ReflectionBypassed,
            ReflectionFailed,
            ReflectionHeld,
            ReflectionKept,
            ReflectionMerged,
            ReflectionOutcome,
            ReflectionPending,
        )

        if isinstance(event, CompactionProgress):
            self._line(f"  … compacting: {event.step}")
        elif isinstance(event, CompactionDone | CompactionFailed) and _manual(event):
            return  # /compact and `reverie compact` print their own one line
        elif isinstance(event, CompactionDone):
            self.notice(f"  {compacted_line(event.evicted, event.tokens_before, event.tokens_after)}")
        elif isinstance(event, CompactionFailed):
            self.notice(f"  ⚠ compaction failed: {one_line(event.error)} (the turn goes on)")
        elif isinstance(event, ReflectionMerged):
            await self._merged(event)
        elif isinstance(event, ReflectionBypassed):
            n = len(event.commits)
            self.notice(
                f"  ⚠ memory: {n} commit{'s' if n != 1 else ''} made by a git outside reverie while a reflection "
                f"merged (no lock, no hook): {' '.join(c[:7] for c in event.commits[:5])}; folded in, nothing lost"
            )
        elif isinstance(event, ReflectionAwaitingReview):
            self.notice(f"  ⏸ {review_line(event)}")
        elif isinstance(event, ReflectionFailed):
            self.notice(f"  ⚠ reflection failed: {one_line(event.error, 160)}")
        elif isinstance(event, ReflectionKept):
            files = f" ({', '.join(event.files)})" if event.files else ""
            self.notice(f"  ⚠ reflection conflict: kept on {event.branch}{files}; `reverie reflections list`")
        elif isinstance(event, ReflectionHeld):
            paths = f" ({', '.join(event.paths)})" if event.paths else ""
            self.notice(f"  ⚠ reflection held back: {one_line(event.reason, 120)}{paths}; {_HELD_FIX.get(event.reason_code, '')}")
        elif isinstance(event, ReflectionOutcome | ReflectionPending) and self.quiet_outcomes:
            return
        elif isinstance(event, ReflectionOutcome) and event.outcome == "no_changes":
            self.notice("  ↻ reflection: no changes to memory")
        elif isinstance(event, ReflectionOutcome) and event.outcome == "interrupted":
            self.notice(f"  ⏸ reflection {event.reflection_id} {one_line(event.reason, 120)}")
        elif isinstance(event, ReflectionPending) and event.turns == 0:
            self.notice(f"  ⏸ reflection waiting to merge: {one_line(event.reason, 120)} (retried at each turn end)")
        elif event.kind == "reflection.failed":
            self.notice(f"  ⚠ reflection failed: {one_line(str(getattr(event, 'error', '') or 'unknown error'))}")
        elif event.kind == "reflection.resolved":
            await self._merged(event, verb="resolved a conflict and merged")

    async def _memory_commit(self, event: MemoryCommitted) -> None:
        files = ", ".join(event.files) or "no files"
        if event.source == "other":
            self.notice(f"  ↻ memory changed by another process: {files} ({event.revision[:7]} {one_line(event.by, 80)})")
            return
        if event.source != "turn" or self.memory_dir is None:
            return
        # deferred: a memory change is shown long after a chat's first request
        from orchestrator.cli.memory_diff import memory_diff

        diff = await blocking.run_sync(
            "git", partial(memory_diff, self.memory_dir, event.previous_revision, event.revision)
        )
        if diff is None or not diff.files:
            return
        self.notice("\n".join([f"  ↻ memory: {diff.summary}", *diff.render()]))

    async def _merged(self, event: Event, verb: str = "merged") -> None:
        commits = int(getattr(event, "commits", 0) or 0)
        revision = str(getattr(event, "revision", "") or "")
        head = f"  ↻ reflection {verb} {commits} commit{'s' if commits != 1 else ''}"
        diff = None
        if self.memory_dir is not None and revision and commits > 0:
            # deferred: a merged reflection is shown long after a chat's first request
            from orchestrator.cli.memory_diff import memory_diff

            diff = await blocking.run_sync("git", partial(memory_diff, self.memory_dir, f"{revision}~{commits}", revision))
        if diff is None or not diff.files:
            self.notice(head)
            return
        self.notice("\n".join([f"{head}: {diff.summary}", *diff.render()]))

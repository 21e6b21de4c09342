"""How a running turn looks in a terminal: streamed text, tool lines, memory and subagent notices.

The renderer is an ``Observer`` of turn events; it keeps track of whether the cursor is at the
start of a line so tool lines never glue onto streamed text. A post-turn memory sync that finds the
repository in trouble is shown too: the agent gets a reminder, and the user should know why.
"""

from __future__ import annotations

import json
import sys
from typing import TextIO

from orchestrator.base.events import (
    CompactionDone,
    CompactionFailed,
    CompactionProgress,
    Event,
    MemoryUpdateInjected,
    ModelRetrying,
    ReflectionKept,
    ReflectionMerged,
    ReminderQueued,
    TextDelta,
    ToolFinished,
    ToolStarted,
)

__all__ = ["TerminalRenderer", "one_line"]


def one_line(text: str, limit: int = 160) -> str:
    flat = " ".join(text.split())
    return flat if len(flat) <= limit else flat[: limit - 1] + "…"


_SYNC_TROUBLE = {
    "conflict": "has a rebase or merge stopped half-way (details: `reverie memory validate`)",
    "dirty": "has uncommitted changes (see `git status` in `reverie memory path`)",
    "invalid": "has a HEAD that fails validation (details: `reverie memory validate --head`)",
    "push_failed": "could not be pushed",
}


def _compact_args(arguments: str) -> str:
    try:
        return json.dumps(json.loads(arguments), ensure_ascii=False, separators=(",", ":"))
    except ValueError:
        return arguments


class TerminalRenderer:
    def __init__(self, out: TextIO | None = None) -> None:
        self.out = out or sys.stdout
        self._at_line_start = True

    def _line(self, text: str) -> None:
        if not self._at_line_start:
            self.out.write("\n")
        self.out.write(text + "\n")
        self._at_line_start = True
        self.out.flush()

    def finish(self) -> None:
        if not self._at_line_start:
            self.out.write("\n")
            self._at_line_start = True
        self.out.flush()

    async def __call__(self, event: Event) -> None:
        if isinstance(event, TextDelta):
            if event.text:
                self.out.write(event.text)
                self._at_line_start = event.text.endswith("\n")
                self.out.flush()
        elif isinstance(event, ToolStarted):
            self._line(f"  ⚙ {event.name}({one_line(_compact_args(event.arguments), 400)})")
        elif isinstance(event, ToolFinished):
            mark = "✓" if event.ok else "✗"
            self._line(f"  {mark} {one_line(event.output) or '(no output)'}")
        elif isinstance(event, ModelRetrying):
            self._line(f"  ⚠ model: {event.message}")
        elif isinstance(event, MemoryUpdateInjected):
            self._line("  ↻ memory changed — <memory_update> injected")
        elif isinstance(event, CompactionProgress):
            self._line(f"  … compacting: {event.step}")
        elif isinstance(event, CompactionDone):
            self._line(f"  ↻ compacted {event.evicted} messages ({event.tokens_before} → {event.tokens_after} tokens)")
        elif isinstance(event, CompactionFailed):
            self._line(f"  ⚠ compaction failed: {one_line(event.error)} (the turn goes on)")
        elif isinstance(event, ReflectionMerged):
            self._line(f"  ↻ reflection merged {event.commits} commit{'s' if event.commits != 1 else ''}")
        elif isinstance(event, ReminderQueued) and event.status in _SYNC_TROUBLE:
            self._line(f"  ⚠ memory repository {_SYNC_TROUBLE[event.status]}; the agent is asked to fix it")
        elif isinstance(event, ReflectionKept):
            self._line(f"  ⚠ reflection conflict: kept on {event.branch}")

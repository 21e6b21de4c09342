"""Every change of the memory repository a session sees, published once with its source (V2).

The session's observer hands this tracker its events; it reads ``HEAD`` at the edges of what could
move it (a turn's start and end, each ``bash`` call's start and end, a reflection's merge) and
publishes one ``memory.commit`` per new commit since the last revision it accounted for:

* inside a ``bash`` call, a commit the call's output names (git prints ``[main 1a2b3c4] …`` for a
  commit; any id of 7 or more hex digits counts) is the turn's own (``source`` ``turn``, ``by`` the
  turn id). When the output names none of the call's commits (``git commit -q``), they are all the
  turn's: nothing else tells them apart. When it names some, the others were made meanwhile by
  another process, whose commit the call waited behind (``other``, ``by`` the commit's subject);
* a merged reflection's commits are the reflection's (``by`` its id);
* anything else that appeared (between turns, between tool calls) came from another process.

The event goes through the session's publisher, so the store's event log, ``reverie events`` and
telemetry's memory spans all see the same change once. Reading ``HEAD`` is one in-process libgit2
call on the ``git`` lane, and commits are described only when it moved.
"""

from __future__ import annotations

import re
from collections.abc import Awaitable, Callable
from functools import partial
from pathlib import Path

from orchestrator.base import blocking
from orchestrator.base.events import Event, MemoryCommitted
from orchestrator.memfs.changes import MemoryChange, changes_between
from orchestrator.memfs.repo import head_revision

__all__ = ["MemoryTracker"]

_HEX = re.compile(r"\b[0-9a-f]{7,40}\b")


class MemoryTracker:
    """Publishes each memory commit once, named by its source (see the module docstring)."""

    def __init__(self, memory_dir: Path, publish: Callable[[Event], Awaitable[None]]) -> None:
        self.memory_dir = memory_dir
        self.publish = publish
        self.known: str | None = None
        self.started = False
        self.turn_id = ""

    async def __call__(self, event: Event) -> None:
        kind = event.kind
        if kind == "turn.start":
            self.turn_id = str(getattr(event, "turn_id", ""))
            await self._settle(None)
        elif kind in ("tool.start", "tool.end") and getattr(event, "name", "") == "bash":
            await self._settle(str(getattr(event, "output", "")) if kind == "tool.end" else None)
        elif kind == "turn.end":
            await self._settle(None)
        elif kind == "reflection.merged":
            await self._settle(None, reflection=str(getattr(event, "reflection_id", "")))

    async def _settle(self, output: str | None, *, reflection: str = "") -> None:
        """Account for what reached ``HEAD`` since the last look: ``output`` is a finished bash call's
        (its commits are the turn's), ``reflection`` a merged reflection's id."""
        head = await blocking.run_sync("git", partial(head_revision, self.memory_dir))
        if not self.started:
            self.started, self.known = True, head
            return
        if head is None or head == self.known:
            return
        changes = await blocking.run_sync("git", partial(changes_between, self.memory_dir, self.known, head))
        self.known = head
        named = _named(changes, output) if output is not None else set()
        for change in changes:
            await self.publish(self._event(change, output, named, reflection))

    def _event(self, change: MemoryChange, output: str | None, named: set[str], reflection: str) -> MemoryCommitted:
        source, by = "other", change.subject
        if reflection:
            source, by = "reflection", reflection
        elif output is not None and (not named or change.commit in named):
            source, by = "turn", self.turn_id
        operation = "delete" if change.deleted_only else "update"
        return MemoryCommitted(change.commit, change.parent, source, by, change.files, operation)


def _named(changes: tuple[MemoryChange, ...], output: str) -> set[str]:
    """The commits ``output`` names by a prefix of 7 or more hex digits."""
    shown = set(_HEX.findall(output))
    return {c.commit for c in changes if any(c.commit.startswith(s) for s in shown)}

"""Every change of the memory repository a session sees, published once with its source (V2, V3).

The session's observer hands this tracker its events; it reads ``HEAD`` at the edges of what could
move it (a turn's start and end, each ``bash`` call's start and end, a reflection's merge) and
publishes one ``memory.commit`` per new commit since the last revision it accounted for.

Who made a commit is what the commit says of itself (V3): its ``Reverie-*`` trailers (H1), read
in the same in-process libgit2 pass that lists the commits (``memfs.changes``), travel whole as the
event's ``provenance``, and name its ``source`` as this session sees it: an ``agent`` commit of a
turn this session ran is the turn's own (``turn``, ``by`` the turn id), a reflection's or a step
the resolver reconciled is the reflection's (``by`` its id), anything else ``other`` (``by`` its
subject), another session's turn on the same agent included. Only a commit without trailers (an
``outside`` one: a git reverie did not run) falls back to where it appeared:

* inside a ``bash`` call, a commit the call's output names (git prints ``[main 1a2b3c4] …``; any id
  of 7 or more hex digits counts) is the turn's, and so is every commit of the call when the output
  names none of them (``git commit -q``); one the output leaves out while naming another was made
  meanwhile by another process;
* a commit that arrived with a merged reflection is the reflection's;
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
from orchestrator.memfs.provenance import OUTSIDE
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
        self.own_turns: set[str] = set()

    async def __call__(self, event: Event) -> None:
        kind = event.kind
        if kind == "turn.start":
            self.turn_id = str(getattr(event, "turn_id", ""))
            self.own_turns.add(self.turn_id)
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
        source, by = self._source(change, output, named, reflection)
        operation = "delete" if change.deleted_only else "update"
        provenance = change.provenance.as_dict()
        return MemoryCommitted(change.commit, change.parent, source, by, change.files, operation, provenance)

    def _source(self, change: MemoryChange, output: str | None, named: set[str], reflection: str) -> tuple[str, str]:
        """``(source, by)`` as this session sees ``change``: from its trailers when it has them,
        else from where it appeared (the module docstring)."""
        said = change.provenance
        if said.source != OUTSIDE:
            if said.source == "agent" and said.turn and said.turn in self.own_turns:
                return "turn", said.turn
            if said.reflection and said.source in ("reflection", "resolver"):
                return "reflection", said.reflection
            return "other", change.subject
        if reflection:
            return "reflection", reflection
        if output is not None and (not named or change.commit in named):
            return "turn", self.turn_id
        return "other", change.subject


def _named(changes: tuple[MemoryChange, ...], output: str) -> set[str]:
    """The commits ``output`` names by a prefix of 7 or more hex digits."""
    shown = set(_HEX.findall(output))
    return {c.commit for c in changes if any(c.commit.startswith(s) for s in shown)}

"""Reverie's event vocabulary (S8): one schema for the CLI, the store and the event log.

Every event is a frozen dataclass with a ``kind``; ``payload()`` is the JSON object the store and
the JSONL event log keep. ``docs/events.md`` documents each kind. What the background subagents
publish (compaction, reflection) is in ``subagent_events``, which a turn that starts neither does
not import (P1: each frozen dataclass costs CPython 3.11 ~0.3 ms to define).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from dataclasses import asdict, dataclass, field, fields
from typing import Any, ClassVar, Protocol

__all__ = [
    "Event",
    "LockWaiting",
    "MemoryCommitted",
    "MemoryUpdateInjected",
    "MemoryWarning",
    "ModelCalled",
    "ModelRetrying",
    "Observer",
    "Publisher",
    "ReminderQueued",
    "TextDelta",
    "ToolFinished",
    "ToolStarted",
    "ignore_event",
    "TurnEnded",
    "TurnStarted",
]


@dataclass(frozen=True)
class Event:
    """The base of every event: ``kind`` names it in the store, the event log and ``docs/events.md``; a
    ``transient`` one is shown and never stored."""

    kind: ClassVar[str] = "event"
    transient: ClassVar[bool] = False

    def payload(self) -> dict[str, Any]:
        """The fields as a new dict; only a field holding a container is deep-copied (``asdict``),
        which every turn's scalar-only events (turn, model, tool) would pay ~10 us each for."""
        values = {name: getattr(self, name) for name in _field_names(type(self))}
        if all(v is None or isinstance(v, _SCALARS) for v in values.values()):
            return values
        return asdict(self)


_SCALARS: tuple[type, ...] = (str, int, float, bool)


_NAMES: dict[type, tuple[str, ...]] = {}


def _field_names(cls: type) -> tuple[str, ...]:
    names = _NAMES.get(cls)
    if names is None:
        names = _NAMES[cls] = tuple(f.name for f in fields(cls))
    return names


@dataclass(frozen=True)
class TurnStarted(Event):
    """A turn was recorded (its user message and reminders are in the store) and is about to run."""

    kind: ClassVar[str] = "turn.start"
    turn_id: str
    conversation_id: str


@dataclass(frozen=True)
class TurnEnded(Event):
    """A turn settled with its status (``end_turn``, ``error``, ``max_steps``, ``interrupted``) after its
    post-turn sync."""

    kind: ClassVar[str] = "turn.end"
    turn_id: str
    conversation_id: str
    status: str
    steps: int
    error: str | None = None


@dataclass(frozen=True)
class TextDelta(Event):
    """Streamed assistant text; shown live, never stored."""

    kind: ClassVar[str] = "text.delta"
    transient: ClassVar[bool] = True
    text: str


@dataclass(frozen=True)
class ModelCalled(Event):
    """One provider request answered: the tokens the provider reported and the wall time it took."""

    kind: ClassVar[str] = "model.call"
    model: str
    prompt_tokens: int
    completion_tokens: int
    latency_ms: float
    purpose: str = "chat"
    finish_reason: str = ""
    """Why the response stopped, as the provider said (``stop``, ``tool_calls``, ``length``)."""
    tool_calls: int = 0
    """Tool calls in the response: a reply with none ends the turn's text (headless output)."""
    request_model: str = ""
    """The model asked for, when the provider answered with another name in ``model``."""


@dataclass(frozen=True)
class LockWaiting(Event):
    """V2: this process waits for a lock another process holds (``what``: ``conversation`` while
    another process runs a turn of it, ``memory`` while the post-turn sync waits behind another
    process's hold of the repository lock, V5, or after the agent's ``git`` waited for it, V7);
    shown as a line, not stored."""

    kind: ClassVar[str] = "lock.wait"
    transient: ClassVar[bool] = True
    what: str
    message: str


@dataclass(frozen=True)
class ModelRetrying(Event):
    """A transient model failure about to be retried; shown, not stored (the final outcome is)."""

    kind: ClassVar[str] = "model.retry"
    transient: ClassVar[bool] = True
    message: str


@dataclass(frozen=True)
class ToolStarted(Event):
    """A tool call about to run; recorded before it runs, so a crash mid-tool still shows what ran."""

    kind: ClassVar[str] = "tool.start"
    call_id: str
    name: str
    arguments: str


@dataclass(frozen=True)
class ToolFinished(Event):
    """A tool call's result, as the model will read it."""

    kind: ClassVar[str] = "tool.end"
    call_id: str
    name: str
    ok: bool
    output: str


@dataclass(frozen=True)
class MemoryCommitted(Event):
    """The memory repository's HEAD moved: one per change, with its provenance (V2). ``source`` is
    who made it, seen from this session: ``turn`` (this session's agent), ``reflection`` (a merge-back
    of ``by``, a reflection id), ``review`` (a person merged ``by``), ``other`` (anyone else: ``by``
    is its commit's subject). ``files`` are the paths it changed."""

    kind: ClassVar[str] = "memory.commit"
    revision: str
    previous_revision: str | None
    source: str = "turn"
    by: str = ""
    files: tuple[str, ...] = ()
    operation: str = "update"
    """``delete`` when the commit only removed files, else ``update``."""
    provenance: dict[str, str] = field(default_factory=dict)
    """What the commit's own ``Reverie-*`` trailers say (H1, ``memfs.provenance``): ``source`` and
    whichever of agent, conversation, turn, reflection, trigger, run, task, undoes it names;
    ``{"source": "outside"}`` for a commit without them (V3)."""


@dataclass(frozen=True)
class MemoryWarning(Event):
    """Something wrong with the memory repository itself, repaired or refused by reverie (a planted
    ``.git`` redirect, a stale lock left by a killed git, a rebuilt index, a missing object); the
    ``message`` is the one line shown on stderr and in the json result."""

    kind: ClassVar[str] = "memory.warning"
    message: str


@dataclass(frozen=True)
class MemoryUpdateInjected(Event):
    """A memory change reached the model as a ``<memory_update>`` message (T1, R4), not a new system prompt."""

    kind: ClassVar[str] = "memory.update_injected"
    revision: str
    previous_revision: str | None


@dataclass(frozen=True)
class ReminderQueued(Event):
    """A reminder waits for the next turn's first request (the memory-git-sync one, with the post-turn
    check's classification)."""

    kind: ClassVar[str] = "reminder.queued"
    key: str
    status: str


Observer = Callable[[Event], Awaitable[None]]


async def ignore_event(_: Event) -> None:
    """The observer of nobody watching."""
    return None


class _Recorder(Protocol):
    async def record_event(
        self,
        kind: str,
        payload: Mapping[str, Any],
        *,
        agent_id: str | None = None,
        conversation_id: str | None = None,
    ) -> Any: ...


@dataclass(frozen=True)
class Publisher:
    """Records an event (unless transient) and shows it to the observer: the one way the turn loop
    and the subagents publish what happens."""

    recorder: _Recorder
    agent_id: str
    observer: Observer | None = None

    async def __call__(self, event: Event, conversation_id: str | None) -> None:
        if not event.transient:
            await self.recorder.record_event(
                event.kind, event.payload(), agent_id=self.agent_id, conversation_id=conversation_id
            )
        if self.observer is not None:
            await self.observer(event)

"""One turn of a conversation (TURN-1.2): reminders, the user message, then the tool loop
with the system prompt resolved before every request, then the post-turn memory sync.

The caller (the supervisor) holds the conversation's turn lock. Once the turn is recorded, whatever
happens the turn gets its status and the post-turn sync runs shielded, so an interrupted turn still
leaves its reminder for the next one; a model failure ends the turn with a one-line error and the
store stays consistent. Reminders are one separate ``reminder`` message before the user's (TURN-7.1,
TURN-7.5), so the user's message stays what they typed. The reminder shape, the step limit, context
overflow, ``first_sent_at`` and ``TurnRunner.next_request`` are in docs/architecture.md, "One turn"."""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import datetime
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, Protocol

import anyio

from orchestrator.agent.budget import BudgetedModel, Meter
from orchestrator.agent.context import ReadsSessionContext, SessionContext
from orchestrator.agent.prompt_cache import (
    HeadRead,
    current_revision,
    preview_system_prompt,
    resolve_system_prompt,
)
from orchestrator.agent.reminders import agent_info_reminder
from orchestrator.agent.replay import RecordedReply
from orchestrator.agent.skills import Skill, append_available_skills, discover_skills
from orchestrator.base import blocking
from orchestrator.base.events import (
    Event,
    LockWaiting,
    MemoryUpdateInjected,
    MemoryWarning,
    ModelCalled,
    Observer,
    ReminderQueued,
    TextDelta,
    ToolFinished,
    ToolStarted,
    TurnEnded,
    TurnStarted,
)
from orchestrator.base.limits import LimitReached, Prices, limits_for
from orchestrator.compaction.planner import ContextWindowTooSmall
from orchestrator.memfs.lockowner import waited_in
from orchestrator.memfs.provenance import Provenance, trailers_env
from orchestrator.models.types import (
    Message,
    ModelClient,
    ModelError,
    ModelRequest,
    ToolCall,
    ToolSpec,
    Usage,
)
from orchestrator.store import StoredMessage, SyncReminder, TurnStatus, new_turn_id, reminder_message
from orchestrator.tools import (
    ToolContext,
    ToolResult,
    oversized_write,
    run_tool,
    tool_specs,
)

if TYPE_CHECKING:
    from orchestrator.agent.memory_sync import SyncResult
    from orchestrator.memfs.lockowner import LockHolder

__all__ = [
    "AGENT_INFO_KEY",
    "SYNC_REMINDER_KEY",
    "Compactor",
    "Observer",
    "TurnOutcome",
    "TurnRunner",
    "max_steps_line",
    "to_model_messages",
]

SYNC_REMINDER_KEY = "memory-git-sync"
_OVERFLOW_RETRIES = 3
AGENT_INFO_KEY = "agent-info"


@dataclass(frozen=True)
class TurnOutcome:
    """How a turn ended and what it produced, for its caller (the CLI, the batch runner, tests)."""

    turn_id: str
    conversation_id: str
    status: TurnStatus
    text: str
    steps: int
    assistant_steps: int
    error: str | None = None
    usage: Usage = Usage()
    memory_updates: int = 0
    sync: SyncResult | None = None
    tool_calls: tuple[str, ...] = field(default_factory=tuple)
    limit: str | None = None
    """The limit a ``limit`` turn stopped at (``session.cost``, B1)."""


class Compactor(Protocol):
    """Context-pressure handling, called before every request (COMPACTION-1.3; the turn loop does not
    know how compaction works, only when to ask)."""

    async def before_request(self, conversation_id: str, system: str, turn_id: str) -> bool:
        """Compact if needed; True when the in-context list changed (the prompt is then re-resolved)."""
        ...

    async def on_overflow(self, conversation_id: str, system: str, turn_id: str) -> bool:
        """The provider said the request is too large; True when something was evicted."""
        ...


def to_model_messages(stored: Sequence[StoredMessage]) -> tuple[Message, ...]:
    return tuple(s.message for s in stored)


class TurnRunner(ReadsSessionContext):
    """Runs turns for one agent; one instance may serve many conversations (it holds no turn state).

    The agent, settings, model, store and observer are read from ``context`` at each use, so a
    change the session makes there (a new model, a rename) applies from the next request on.
    """

    def __init__(self, *, context: SessionContext, workspace: Path, compactor: Compactor | None = None) -> None:
        self.context = context
        self.workspace = workspace
        self.compactor = compactor

    async def _emit(self, event: Event, conversation_id: str) -> None:
        """Record now, then show: for what precedes work that may take long (a tool run)."""
        await self.context.publish(event, conversation_id)

    async def _stage(self, event: Event, conversation_id: str) -> None:
        """Show now; record with the store's next write of this turn (``Store.stage_event``)."""
        if not event.transient:
            self.store.stage_event(
                event.kind, event.payload(), agent_id=self.agent.agent_id, conversation_id=conversation_id
            )
        await self.observer(event)

    async def run_turn(
        self, conversation_id: str, user_text: str, *, at: str | None = None, recorded: str | None = None
    ) -> TurnOutcome:
        """One turn. ``at``: the time the turn's messages are dated with for search (their
        ``created_at`` metadata), when it is not now: a replayed recorded session's date.
        ``recorded``: the assistant's recorded reply, given instead of a model call
        (``orchestrator.agent.replay``); everything else runs as in a live turn."""
        store, agent = self.store, self.agent
        turn_id = new_turn_id()
        started = TurnStarted(turn_id, conversation_id)
        await store.open_turn(
            conversation_id,
            Message(role="user", content=user_text),
            agent_id=agent.agent_id,
            turn_id=turn_id,
            agent_info=partial(self._agent_info, conversation_id),
            agent_info_key=AGENT_INFO_KEY,
            settle=_dangling_answers,
            events=[(started.kind, started.payload())],
            user_metadata={"created_at": at} if at else None,
        )
        model = self._budgeted()
        state = _TurnState(at=at, model=model if recorded is None else RecordedReply(model, recorded))
        status: TurnStatus = "error"
        error: str | None = None
        sync: SyncResult | None = None
        try:
            await self.observer(started)
            skills, state.head = await blocking.run_sync("git", partial(_skills_and_head, agent.memory_dir))
            status, error = await self._loop(conversation_id, turn_id, skills, state)
        except anyio.get_cancelled_exc_class():
            status, error = "interrupted", "the turn was interrupted"
            raise
        except Exception as exc:
            status, error = "error", _one_line(f"{type(exc).__name__}: {exc}")
            raise
        finally:
            with anyio.CancelScope(shield=True):
                reminder: SyncReminder | None = None
                shown: list[Event] = []
                try:
                    if status == "interrupted" and state.streamed.strip():
                        await self._keep_cut_reply(conversation_id, turn_id, state, state.streamed, "interrupted")
                        state.streamed = ""
                    sync, reminder, shown = await self._after_turn(conversation_id)
                finally:
                    # Whatever failed above, the turn is closed: its status, and its view of the store.
                    shown.append(TurnEnded(turn_id, conversation_id, status, state.steps, error))
                    await self._close(turn_id, status, error, conversation_id, reminder, shown)
        return TurnOutcome(
            turn_id=turn_id,
            conversation_id=conversation_id,
            status=status,
            text=state.text,
            steps=state.steps,
            assistant_steps=state.assistant_steps,
            error=error,
            usage=Usage(state.prompt_tokens, state.completion_tokens),
            memory_updates=state.memory_updates,
            sync=sync,
            tool_calls=tuple(state.tool_calls),
            limit=state.limit,
        )

    def _budgeted(self) -> ModelClient:
        """The model behind this turn's budget (B1): the turn's limits over the session's; the bare
        model when no limit of either is set, so an unlimited turn pays no estimate."""
        settings = self.settings
        meter = Meter(limits_for(settings, "turn"), Prices.of(settings), parent=self.context.meter)
        if not any(m.limits.any for m in meter.chain()):
            return self.model
        return BudgetedModel(self.model, meter, window=settings.context_window)

    async def _close(
        self,
        turn_id: str,
        status: TurnStatus,
        error: str | None,
        conversation_id: str,
        reminder: SyncReminder | None,
        shown: list[Event],
    ) -> None:
        """``Store.close_turn`` with the events to record, then show them (also if it failed)."""
        try:
            await self.store.close_turn(
                turn_id,
                status,
                error,
                conversation_id=conversation_id,
                agent_id=self.agent.agent_id,
                reminder=reminder,
                events=[(e.kind, e.payload()) for e in shown if not e.transient],
            )
        finally:
            for event in shown:
                await self.observer(event)

    async def next_request(self, conversation_id: str) -> ModelRequest:
        """The first request the next turn would send, without the user's message; nothing is
        written (docs/architecture.md, "One turn"). Dangling tool calls it would settle first are left out."""
        store, agent = self.store, self.agent
        skills, head = await blocking.run_sync("git", partial(_skills_and_head, agent.memory_dir))
        prompt = await preview_system_prompt(
            store,
            conversation_id=conversation_id,
            agent_id=agent.agent_id,
            memory_dir=agent.memory_dir,
            raw_system=agent.raw_system,
            head=head,
        )
        pending = [(r.priority, r.text) for r in await store.pending_reminders(conversation_id)]
        if not await store.was_sent(conversation_id, AGENT_INFO_KEY):
            last = await store.last_message_at(agent.agent_id)
            pending.append((0, self._agent_info(conversation_id, last)))
        pending.sort(key=lambda item: item[0])  # stable: queueing order within a priority, as delivered
        reminders = (reminder_message([text for _, text in pending]),) if pending else ()
        history = to_model_messages(await store.in_context(conversation_id))
        return self._request(append_available_skills(prompt.content, skills), (*history, *reminders, *prompt.messages),
                             tool_specs())

    def _request(self, system: str, messages: Sequence[Message], tools: Sequence[ToolSpec]) -> ModelRequest:
        return ModelRequest(system=system, messages=tuple(messages), tools=tuple(tools), model=self.settings.model)

    async def _loop(
        self, conversation_id: str, turn_id: str, skills: list[Skill], state: _TurnState
    ) -> tuple[TurnStatus, str | None]:
        specs = tool_specs()
        overflow_retries = 0
        while True:
            state.steps += 1
            system = await self._system_prompt(conversation_id, turn_id, skills, state)
            try:
                if self.compactor and await self.compactor.before_request(conversation_id, system, turn_id):
                    system = await self._system_prompt(conversation_id, turn_id, skills, state)
            except ContextWindowTooSmall as exc:
                return "error", str(exc)
            history = await self.store.in_context(conversation_id)
            request = self._request(system, to_model_messages(history), specs)
            started = time.perf_counter()
            await self.store.mark_prompt_sent(conversation_id)
            try:
                response = await (state.model or self.model).complete(request, on_text=self._text_sink(state))
            except LimitReached as exc:
                state.steps -= 1  # not sent: steps count provider requests
                state.limit = exc.limit
                await self._stage(exc.event(), conversation_id)
                return "limit", str(exc)
            except ModelError as exc:
                if exc.context_overflow and self.compactor and overflow_retries < _OVERFLOW_RETRIES:
                    overflow_retries += 1
                    try:
                        evicted = await self.compactor.on_overflow(conversation_id, system, turn_id)
                    except ContextWindowTooSmall as refusal:
                        return "error", str(refusal)
                    if evicted:
                        state.steps -= 1
                        continue
                if exc.partial_text:
                    await self._keep_cut_reply(conversation_id, turn_id, state, exc.partial_text, "partial")
                return "error", _one_line(str(exc)) or type(exc).__name__
            overflow_retries = 0
            usage = response.usage
            state.prompt_tokens += usage.prompt_tokens
            state.completion_tokens += usage.completion_tokens
            await self._stage(
                ModelCalled(
                    model=response.model or self.settings.model,
                    prompt_tokens=usage.prompt_tokens,
                    completion_tokens=usage.completion_tokens,
                    latency_ms=round((time.perf_counter() - started) * 1000, 3),
                    finish_reason=response.finish_reason,
                    tool_calls=len(response.message.tool_calls),
                    request_model=self.settings.model,
                    purpose="replay" if response.replayed else "chat",
                ),
                conversation_id,
            )
            message, refused = _without_oversized_writes(response.message)
            state.streamed = ""
            metadata: dict[str, object] = {
                "usage": {"prompt_tokens": usage.prompt_tokens, "completion_tokens": usage.completion_tokens}
            }
            if state.at:
                metadata["created_at"] = state.at
            await self.store.append_message(conversation_id, message, turn_id=turn_id, metadata=metadata)
            if message.content.strip():
                state.text = message.content
                state.assistant_steps += 1
            if not message.tool_calls:
                return "end_turn", None
            await self._run_tools(conversation_id, turn_id, message.tool_calls, state, refused)
            if state.steps >= self.settings.max_steps:
                return "max_steps", max_steps_line(state.steps)

    async def _system_prompt(self, conversation_id: str, turn_id: str, skills: list[Skill], state: _TurnState) -> str:
        resolved = await resolve_system_prompt(
            self.store,
            conversation_id=conversation_id,
            agent_id=self.agent.agent_id,
            memory_dir=self.agent.memory_dir,
            raw_system=self.agent.raw_system,
            turn_id=turn_id,
            head=state.head,
        )
        state.head = None
        if resolved.update_message_id is not None and resolved.revision is not None:
            state.memory_updates += 1
            await self._stage(MemoryUpdateInjected(resolved.revision, resolved.previous_revision), conversation_id)
        return append_available_skills(resolved.content, skills)

    def _text_sink(self, state: _TurnState) -> Callable[[str], Awaitable[None]]:
        async def sink(text: str) -> None:
            state.streamed += text
            await self.observer(TextDelta(text))

        return sink

    async def _keep_cut_reply(
        self, conversation_id: str, turn_id: str, state: _TurnState, text: str, mark: str
    ) -> None:
        """A reply cut short (``interrupted`` by the user, or the ``partial`` text of a request that
        failed at a bound) stays in the conversation: what the user saw is what the model is told it
        said, marked in the metadata so a reader can tell it was cut."""
        await self.store.append_message(
            conversation_id, Message(role="assistant", content=text), turn_id=turn_id, metadata={mark: True}
        )
        state.text = text

    async def _run_tools(
        self,
        conversation_id: str,
        turn_id: str,
        calls: Sequence[ToolCall],
        state: _TurnState,
        refused: Mapping[str, str],
    ) -> None:
        ctx = ToolContext.from_settings(
            self.settings,
            workspace=self.workspace,
            agent_id=self.agent.agent_id,
            conversation_id=conversation_id,
            agent_name=self.agent.name,
            memory_dir=self.agent.memory_dir,
            store=self.store,
            overflow=True,
            extra_env=trailers_env(Provenance("agent", self.agent.agent_id, conversation_id, turn_id)),
        )
        for call in calls:
            state.tool_calls.append(call.name)
            await self._emit(ToolStarted(call.id, call.name, call.arguments), conversation_id)
            if call.id in refused:
                result = ToolResult(False, refused[call.id])
            else:
                result = await run_tool(call.name, call.arguments, ctx)
            await self.store.append_message(
                conversation_id,
                Message(role="tool", content=result.output, tool_call_id=call.id, name=call.name),
                turn_id=turn_id,
                metadata={"ok": result.ok},
            )
            waited = waited_in(result.output) if call.name == "bash" else None
            if waited is not None:
                await self._stage(LockWaiting("memory", waited), conversation_id)
            await self._stage(ToolFinished(call.id, call.name, result.ok, result.output), conversation_id)

    def _agent_info(self, conversation_id: str, last: str | None) -> str:
        """The agent-info text; ``last``: when the agent last recorded a message, read before this
        turn wrote anything (``Store.open_turn`` calls this in its transaction)."""
        return agent_info_reminder(
            agent_id=self.agent.agent_id,
            agent_name=self.agent.name,
            agent_description=self.agent.description,
            conversation_id=conversation_id,
            memory_dir=str(self.agent.memory_dir),
            last_run=datetime.fromisoformat(last.replace("Z", "+00:00")) if last else None,
        )

    async def _say_sync_waits(self, holder: LockHolder | None) -> None:
        """V5: the post-turn sync is about to wait behind another process's lock; said as a line
        naming that process when the lock's owner record does (V7)."""
        await self.observer(LockWaiting("memory", _sync_queued(holder)))

    async def _after_turn(self, conversation_id: str) -> tuple[SyncResult | None, SyncReminder | None, list[Event]]:
        """TURN-4.7: classify the checkout and decide the reminder (``close_turn`` writes it,
        with the events returned here, which are then shown); never raises.

        The result is ``None`` when a merge held the repository (the sync is skipped silently and the
        queue is left as it was) or when the sync failed (a ``memory.sync_failed`` event)."""
        # deferred: the sync (its locks, the validator, libgit2's status) loads after the first reply (P1)
        from orchestrator.agent.memory_sync import after_turn, sync_reminder_for

        try:
            result = await after_turn(self.agent.memory_dir, on_wait=self._say_sync_waits)
            if result is None:
                return None, None, []
            text = sync_reminder_for(result)
            reminder = SyncReminder(SYNC_REMINDER_KEY, text, priority=50)
            queued: list[Event] = [] if text is None else [ReminderQueued(SYNC_REMINDER_KEY, result.status)]
            queued.extend(MemoryWarning(line) for line in result.warnings)
            return result, reminder, queued
        except Exception as exc:  # the sync must never change the turn's result (4.7 item 7)
            self.store.stage_event(
                "memory.sync_failed", {"error": f"{type(exc).__name__}: {exc}"}, conversation_id=conversation_id
            )
            return None, None, []


def _sync_queued(holder: LockHolder | None) -> str:
    """V5's line; the holder as V7 names it, else what it may be."""
    if holder is None:
        who = "another process holds this agent's memory repository lock (a commit or a merge)"
    else:
        what = f", {holder.source}" if holder.source else ""
        who = f"another process (pid {holder.pid}{what}) holds this agent's memory repository lock"
    return f"{who}; this turn's memory sync is queued behind it"


def _without_oversized_writes(message: Message) -> tuple[Message, dict[str, str]]:
    """The reply as it is kept, and the refusals of its oversized ``write_file`` calls by call id.

    Such a call is refused without running (nothing written), and the conversation keeps it with a
    note of the content's size instead of the content: kept whole, it would make every later
    request too large for the window (A8)."""
    refused: dict[str, str] = {}
    calls = []
    for call in message.tool_calls:
        found = oversized_write(call.name, call.arguments)
        if found is None:
            calls.append(call)
            continue
        kept, refused[call.id] = found
        calls.append(replace(call, arguments=kept))
    return (replace(message, tool_calls=tuple(calls)) if refused else message), refused


def _dangling_answers(history: Sequence[StoredMessage]) -> list[Message]:
    """A turn killed between a tool call and its result leaves a call without an answer, which
    providers reject; each gets an error result before the next request (``Store.open_turn``)."""
    answered = {m.message.tool_call_id for m in history if m.message.role == "tool"}
    return [
        Message(
            role="tool",
            content="Error: the tool call was interrupted before it finished; its effect is unknown.",
            tool_call_id=call.id,
            name=call.name,
        )
        for m in history
        if m.message.role == "assistant"
        for call in m.message.tool_calls
        if call.id not in answered
    ]


def _skills_and_head(memory_dir: Path) -> tuple[list[Skill], HeadRead]:
    """What a turn reads from its memory before the first request, in one worker hop."""
    return discover_skills(memory_dir), HeadRead(current_revision(memory_dir))


@dataclass
class _TurnState:
    """What one turn accumulates across its requests."""

    head: HeadRead | None = None
    """HEAD read with the skills at the turn's start, for its first request only."""
    at: str | None = None
    """``run_turn``'s ``at``: the date the turn's messages carry (a replayed session's)."""
    model: ModelClient | None = None
    """The model of this turn: the runner's, or a recorded reply in front of it."""
    steps: int = 0
    assistant_steps: int = 0
    text: str = ""
    streamed: str = ""
    prompt_tokens: int = 0
    completion_tokens: int = 0
    memory_updates: int = 0
    tool_calls: list[str] = field(default_factory=list)
    limit: str | None = None


def max_steps_line(steps: int) -> str:
    """D13's line, shown by ``chat -p`` (exit 3) and the REPL when a turn hits the limit."""
    return (
        f"stopped after {steps} steps (max_steps); send another message to continue, "
        "or raise [turn] max_steps / REVERIE_MAX_STEPS"
    )


def _one_line(text: str) -> str:
    """An error as the one line the user sees: its first non-empty line, trimmed."""
    return next((line.strip() for line in text.splitlines() if line.strip()), "")

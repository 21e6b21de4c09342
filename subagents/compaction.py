"""The compaction subagent: watches context pressure before every model request and compacts the
conversation when it gets too full (COMPACTION-1, COMPACTION-4 to COMPACTION-6; C1-C9, S3-S8).

It compacts inside the request past the trigger and prepares a summary in the background past the
soft threshold (C4); each summarisation works in a worktree of its own (C9); applying is one store
transaction; a compaction never fails a turn, and every ``compaction.start`` has exactly one end
event. One module because it is one subagent's whole life, and the commit point that makes applying
cancellation-safe must be read next to what it commits; what it asks of the model and of memory is
:mod:`subagents.compaction_summary`. Each choice (C8's context size, the soft threshold, D4's cut,
"never larger", ...) is in docs/architecture.md, "The compaction subagent"."""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable, Mapping, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass, replace
from fractions import Fraction
from functools import partial
from typing import TYPE_CHECKING, Any, Literal
from uuid import uuid4

import anyio

from orchestrator.agent.context import ReadsSessionContext
from orchestrator.base.errors import error_line
from orchestrator.base.events import (
    Event,
)
from orchestrator.base.limits import limits_for
from orchestrator.compaction import (
    CompactionMode,
    CompactionPlan,
    CompactionSettings,
    ContextSize,
    ContextWindowTooSmall,
    context_size,
    estimate_message,
    estimate_messages,
    estimate_text,
    plan_compaction,
    should_compact,
    should_prepare,
    system_prompt_tokens,
    tool_schema_tokens,
)
from orchestrator.compaction.result import CompactionResult
from orchestrator.models.types import Message, Usage
from orchestrator.runtime.plugins import Spawner
from orchestrator.store import PromptRecord, StoredMessage
from orchestrator.tools import tool_specs

if TYPE_CHECKING:
    from orchestrator.agent.context import SessionContext
    from orchestrator.base.config import Settings
    from orchestrator.compaction import CompactionOutcome

__all__ = ["AGENT_INFO_KEY", "CompactionResult", "CompactionSubagent", "Sleep", "Trigger"]

AGENT_INFO_KEY = "agent-info"

Sleep = Callable[[float], Awaitable[None]]
Trigger = Literal["context_window_limit", "context_window_overflow", "manual"]


@dataclass(frozen=True)
class _Prepared:
    """A background preparation ready to apply: the messages it summarised (it is stale once they
    change), its outcome, and the system prompt's and tools' tokens it was planned with."""

    ids: tuple[str, ...]
    outcome: CompactionOutcome
    fixed: int
    compaction_id: str


class _Conversation:
    """Per-conversation state: at most one background preparation, running or ready."""

    def __init__(self) -> None:
        self.prepared: _Prepared | None = None
        self.preparing: anyio.Event | None = None


def _new_id() -> str:
    return f"cmp-{uuid4().hex[:12]}"


class _Ended:
    """What ``_ending`` saw: the error of a compaction it ended as failed (the body then falls through)."""

    error: str | None = None


def _usage_anchor(history: Sequence[StoredMessage]) -> tuple[Usage | None, int | None]:
    """The newest assistant usage recorded after the summary in context (C8), with its index."""
    boundary = max((m.seq for m in history if m.message.kind == "summary"), default=0)
    for index in range(len(history) - 1, -1, -1):
        stored = history[index]
        if stored.seq <= boundary or stored.message.role != "assistant":
            continue
        usage = stored.metadata.get("usage")
        if not isinstance(usage, Mapping):
            continue
        prompt, completion = usage.get("prompt_tokens"), usage.get("completion_tokens")
        if isinstance(prompt, int) and isinstance(completion, int) and prompt + completion > 0:
            return Usage(prompt, completion), index
    return None, None


class CompactionSubagent(ReadsSessionContext):
    """The ``Compactor`` of a ``TurnRunner`` (see the module docstring), one per agent and session.

    ``sleep`` is the summarizer's backoff wait (injectable so tests never wait). Without a
    ``supervisor`` no background preparation happens; every compaction then runs in the request.
    """

    def __init__(
        self,
        *,
        context: SessionContext,
        supervisor: Spawner | None = None,
        sleep: Sleep = anyio.sleep,
        compaction: CompactionSettings | None = None,
    ) -> None:
        self.context = context
        self.supervisor = supervisor
        self.sleep = sleep
        self._compaction = compaction
        self._derived: tuple[Settings, CompactionSettings] | None = None
        self._tool_tokens = tool_schema_tokens(tool_specs())
        self._conversations: dict[str, _Conversation] = {}
        self._closed = False

    @property
    def compaction(self) -> CompactionSettings:
        """The settings given at construction, else derived from the session's current settings."""
        if self._compaction is not None:
            return self._compaction
        settings = self.context.settings
        if self._derived is None or self._derived[0] is not settings:
            self._derived = (settings, CompactionSettings.from_config(settings))
        return self._derived[1]

    # -- the Compactor protocol -------------------------------------------------------------------

    async def before_request(self, conversation_id: str, system: str, turn_id: str) -> bool:
        """Compact when over the trigger; start a background preparation past the soft threshold."""
        changed = False
        try:
            history = await self.store.in_context(conversation_id)
            size = self._size(history, system)
            window = self.compaction.context_window
            if should_compact(size.tokens, window):
                changed = (await self._at_trigger(conversation_id, system, turn_id)).changed
            elif should_prepare(size.tokens, window, Fraction(str(self.compaction.soft_threshold_fraction))):
                await self._maybe_prepare(conversation_id, system, history)
        except (anyio.get_cancelled_exc_class(), ContextWindowTooSmall):
            raise
        except Exception as exc:
            await self._report(conversation_id, "context_window_limit", exc)
        return changed

    async def on_overflow(self, conversation_id: str, system: str, turn_id: str) -> bool:
        """The provider refused the request as too large: compact now, whatever the estimate says."""
        try:
            result = await self._compact(
                conversation_id, system, turn_id, trigger="context_window_overflow", in_turn=True
            )
        except (anyio.get_cancelled_exc_class(), ContextWindowTooSmall):
            raise
        except Exception as exc:
            await self._report(conversation_id, "context_window_overflow", exc)
            return False
        return result.changed

    # -- public helpers ---------------------------------------------------------------------------

    async def pressure(self, conversation_id: str, system: str) -> ContextSize:
        """The context size the trigger compares (C8)."""
        return self._size(await self.store.in_context(conversation_id), system)

    async def compact_now(
        self,
        conversation_id: str,
        *,
        mode: CompactionMode | None = None,
        system: str | None = None,
        turn_id: str | None = None,
    ) -> CompactionResult:
        """A manual compaction (trigger ``manual``, no size check). The caller holds the turn lock.

        ``system`` defaults to the conversation's stored prompt (or a fresh compile), used only to
        count the system prompt's tokens. Raises only for storage or git errors.
        """
        if system is None:
            row = await self.store.get_prompt(conversation_id)
            system = row.content if row is not None else (await self._recompile(conversation_id, 0)).content
        return await self._compact(
            conversation_id, system, turn_id, trigger="manual", in_turn=False, mode=mode
        )

    async def close(self) -> None:
        """The session ends: a prepared summary never applied gets its ``compaction.cancelled``, and
        a preparation that finishes later (the supervisor cancels or drains it) ends the same way."""
        self._closed = True
        for conversation_id, state in self._conversations.items():
            prepared, state.prepared = state.prepared, None
            if prepared is not None:
                await self._end(
                    self._cancelled(prepared.compaction_id, "the session ended before it was applied"),
                    conversation_id,
                )

    async def wait_prepared(self, conversation_id: str) -> bool:
        """Wait for a running background preparation; True when one is ready (for tests and tools)."""
        state = self._state(conversation_id)
        if state.preparing is not None:
            await state.preparing.wait()
        return state.prepared is not None

    # -- internals --------------------------------------------------------------------------------

    def _state(self, conversation_id: str) -> _Conversation:
        return self._conversations.setdefault(conversation_id, _Conversation())

    def _fixed(self, system: str) -> int:
        return system_prompt_tokens(system) + self._tool_tokens

    def _size(self, history: Sequence[StoredMessage], system: str) -> ContextSize:
        usage, index = _usage_anchor(history)
        return context_size(
            [m.message for m in history],
            system_prompt_tokens=system_prompt_tokens(system),
            tool_tokens=self._tool_tokens,
            usage=usage,
            usage_index=index,
        )

    async def _emit(self, event: Event, conversation_id: str) -> None:
        await self.context.publish(event, conversation_id)

    async def _end(self, event: Event, conversation_id: str) -> None:
        """Publish a terminal event whatever is being cancelled; a store that cannot take it is not
        the turn's problem."""
        try:
            with anyio.CancelScope(shield=True):
                await self._emit(event, conversation_id)
        except Exception:
            pass

    @staticmethod
    def _cancelled(compaction_id: str, reason: str) -> Event:
        # deferred (here and below): compaction's events load with the first compaction (P1)
        from orchestrator.base.subagent_events import CompactionCancelled

        return CompactionCancelled(compaction_id, reason)

    async def _supersede(self, conversation_id: str, prepared: _Prepared, reason: str) -> None:
        # deferred: compaction's events load with the first compaction (P1)
        from orchestrator.base.subagent_events import CompactionSuperseded

        await self._end(CompactionSuperseded(prepared.compaction_id, reason), conversation_id)

    @asynccontextmanager
    async def _ending(
        self, conversation_id: str, compaction_id: str, trigger: str, cancelled: str
    ) -> AsyncIterator[_Ended]:
        """The abnormal ends of a started compaction: cancellation publishes ``compaction.cancelled``
        (``cancelled`` says why) and re-raises; ``ContextWindowTooSmall`` publishes
        ``compaction.failed`` and re-raises; any other exception publishes ``compaction.failed`` and
        is swallowed (compaction never fails a turn), with its text in the yielded ``_Ended``."""
        # deferred: compaction's events load with the first compaction (P1)
        from orchestrator.base.subagent_events import CompactionFailed

        ended = _Ended()
        try:
            yield ended
        except anyio.get_cancelled_exc_class():
            await self._end(self._cancelled(compaction_id, cancelled), conversation_id)
            raise
        except ContextWindowTooSmall as exc:
            await self._end(CompactionFailed(f"{trigger}: {exc}", 0, compaction_id, trigger), conversation_id)
            raise
        except Exception as exc:
            ended.error = f"{trigger}: {error_line(exc)}"
            await self._end(CompactionFailed(ended.error, 0, compaction_id, trigger), conversation_id)

    async def _report(self, conversation_id: str, trigger: str, exc: BaseException) -> None:
        """Record a compaction that changed nothing; reporting itself must not fail the turn."""
        # deferred (here and below): compaction's events load with the first compaction (P1)
        from orchestrator.base.subagent_events import CompactionFailed

        try:
            with anyio.CancelScope(shield=True):
                await self._emit(CompactionFailed(f"{trigger}: {error_line(exc)}", 0, trigger=trigger), conversation_id)
        except Exception:
            pass

    async def _at_trigger(self, conversation_id: str, system: str, turn_id: str) -> CompactionResult:
        # deferred: the subagent's events load with its first run (P1)
        from orchestrator.base.subagent_events import CompactionProgress

        state = self._state(conversation_id)
        if state.preparing is not None:
            await self.observer(CompactionProgress("waiting for the summary prepared in the background"))
            await state.preparing.wait()
        prepared, state.prepared = state.prepared, None
        if prepared is not None:
            applied = await self._apply_prepared(conversation_id, system, turn_id, prepared)
            if isinstance(applied, CompactionResult):
                return applied
            if applied is not None:
                await self._supersede(conversation_id, prepared, applied)
        return await self._compact(
            conversation_id, system, turn_id, trigger="context_window_limit", in_turn=True
        )

    async def _maybe_prepare(self, conversation_id: str, system: str, history: Sequence[StoredMessage]) -> None:
        if self.supervisor is None or self._closed:
            return
        state = self._state(conversation_id)
        if state.preparing is not None:
            return
        if state.prepared is not None:
            ids = tuple(m.id for m in history)
            if ids[: len(state.prepared.ids)] == state.prepared.ids:
                return
            stale, state.prepared = state.prepared, None
            await self._supersede(conversation_id, stale, "the conversation changed since its snapshot")
        done = anyio.Event()
        state.preparing = done
        fixed = self._fixed(system)
        self.supervisor.spawn(
            f"compaction-prepare-{conversation_id}",
            partial(self._prepare, conversation_id, fixed, done, tuple(history)),
            seconds=limits_for(self.context.settings, "compaction").seconds,
        )

    async def _prepare(
        self, conversation_id: str, fixed: int, done: anyio.Event, history: Sequence[StoredMessage]
    ) -> None:
        """Background (C4): plan and summarise the snapshot the trigger saw (not what the store holds
        when the job starts, so the same conversation always prepares the same summary); the trigger
        applies it if still valid."""
        # deferred: the subagent's events load with its first run (P1)
        from orchestrator.base.subagent_events import CompactionFailed, CompactionStarted

        state = self._state(conversation_id)
        try:
            messages = [m.message for m in history]
            plan = self._plan(messages, fixed, None)
            if plan.evicted_count == 0 or plan.refused:
                return
            compaction_id = _new_id()
            await self._emit(
                CompactionStarted(
                    plan.mode, plan.messages_before, plan.tokens_before, background=True, compaction_id=compaction_id
                ),
                conversation_id,
            )
            trigger = "context_window_limit"
            async with self._ending(conversation_id, compaction_id, trigger, "the session ended while it ran"):
                outcome = await self._summarize(conversation_id, history, plan, fixed, trigger)
                if outcome.status != "done":
                    error = f"background preparation: {outcome.error or 'the summarizer failed'}"
                    await self._end(CompactionFailed(error, 0, compaction_id, trigger), conversation_id)
                elif self._closed:
                    await self._end(
                        self._cancelled(compaction_id, "the session ended before it was applied"), conversation_id
                    )
                else:
                    state.prepared = _Prepared(tuple(m.id for m in history), outcome, fixed, compaction_id)
        finally:
            state.preparing = None
            done.set()

    def _plan(self, messages: Sequence[Message], fixed: int, mode: CompactionMode | None) -> CompactionPlan:
        system_tokens = fixed - self._tool_tokens
        return plan_compaction(
            messages,
            self.compaction,
            system_prompt_tokens=system_tokens,
            tool_tokens=self._tool_tokens,
            mode=mode,
        )

    async def _compact(
        self,
        conversation_id: str,
        system: str,
        turn_id: str | None,
        *,
        trigger: Trigger,
        in_turn: bool,
        mode: CompactionMode | None = None,
    ) -> CompactionResult:
        # deferred: the subagent's events load with its first run (P1)
        from orchestrator.base.subagent_events import CompactionProgress, CompactionStarted

        history = await self.store.in_context(conversation_id)
        fixed = self._fixed(system)
        messages = [m.message for m in history]
        plan = self._plan(messages, fixed, mode)
        if plan.needed_tokens is not None:
            raise ContextWindowTooSmall(self.compaction.context_window, plan.needed_tokens)
        if plan.evicted_count == 0 and plan.cut_index is None:
            return CompactionResult(
                "skipped",
                trigger,
                plan.mode,
                0,
                plan.tokens_before,
                plan.tokens_before,
                len(history),
                len(history),
            )
        state = self._state(conversation_id)
        stale, state.prepared = state.prepared, None
        if stale is not None:
            await self._supersede(conversation_id, stale, "a compaction in the request replaced it")
        compaction_id = _new_id()
        await self._emit(
            CompactionStarted(
                plan.mode, plan.messages_before, plan.tokens_before, background=False, compaction_id=compaction_id
            ),
            conversation_id,
        )
        cancelled = "the turn was interrupted" if in_turn else "cancelled"
        async with self._ending(conversation_id, compaction_id, trigger, cancelled) as ended:
            if in_turn:
                await self.observer(CompactionProgress(f"summarising {len(plan.summarized)} messages"))
            outcome = await self._summarize(conversation_id, history, plan, fixed, trigger)
            return await self._apply(
                conversation_id, history, [], outcome, fixed, turn_id, background=False, compaction_id=compaction_id
            )
        count = len(history)
        return CompactionResult(
            "error", trigger, plan.mode, 0, plan.tokens_before, plan.tokens_before, count, count, error=ended.error
        )

    async def _apply_prepared(
        self, conversation_id: str, system: str, turn_id: str, prepared: _Prepared
    ) -> CompactionResult | str | None:
        """The prepared result applied when its snapshot still starts the context and it gets under
        the trigger; else why not (the caller supersedes it), or None when applying it failed (its
        ``compaction.failed`` is published)."""
        history = await self.store.in_context(conversation_id)
        ids = tuple(m.id for m in history)
        count = len(prepared.ids)
        if ids[:count] != prepared.ids:
            return "the conversation changed since its snapshot"
        appended = history[count:]
        outcome = prepared.outcome
        if outcome.plan.cut_index is not None and appended:
            return "its snapshot cut the newest message, and messages came after it"
        late = [m.message for m in appended if m.message.kind != "memory_update"]
        after = (
            self._fixed(system)
            + estimate_text(outcome.message_text)
            + estimate_messages([*outcome.plan.kept_messages, *late])
        )
        if should_compact(after, self.compaction.context_window):
            return "it would leave the context above the trigger"
        compaction_id = prepared.compaction_id
        async with self._ending(conversation_id, compaction_id, "context_window_limit", "the turn was interrupted"):
            return await self._apply(
                conversation_id,
                history[:count],
                appended,
                prepared.outcome,
                self._fixed(system),
                turn_id,
                background=True,
                compaction_id=compaction_id,
            )
        return None

    async def _summarize(
        self,
        conversation_id: str,
        history: Sequence[StoredMessage],
        plan: CompactionPlan,
        fixed: int,
        trigger: str,
    ) -> CompactionOutcome:
        # deferred: the ladder, the worktree and the compiler load with the first compaction (P1)
        from subagents.compaction_summary import summarize

        return await summarize(
            self.context,
            self.compaction,
            history,
            plan,
            fixed=fixed,
            tool_tokens=self._tool_tokens,
            trigger=trigger,
            sleep=self.sleep,
            emit=partial(self._emit, conversation_id=conversation_id),
        )

    async def _recompile(self, conversation_id: str, message_count: int) -> PromptRecord:
        # deferred: as the summary, with the first compaction
        from subagents.compaction_summary import recompile

        return await recompile(self.context, conversation_id, message_count)

    async def _apply(
        self,
        conversation_id: str,
        planned: Sequence[StoredMessage],
        appended: Sequence[StoredMessage],
        outcome: CompactionOutcome,
        fixed: int,
        turn_id: str | None,
        *,
        background: bool,
        compaction_id: str,
    ) -> CompactionResult:
        """The commit point (one transaction), then the S5 copies if any, then the terminal event.
        A summary that would not make the request smaller is not applied (status ``error``)."""
        # deferred: as the ladder, with the first compaction
        from orchestrator.base.subagent_events import CompactionDone, CompactionFailed
        from subagents.compaction_summary import summary_message_for

        plan = outcome.plan
        cut = plan.cut_index
        keep = [planned[i].id for i in plan.kept if cut is None or i < cut]
        copies = [
            m for i, m in zip(plan.kept, plan.kept_messages, strict=True) if cut is not None and i >= cut
        ]
        copy_of = [planned[i].id for i in plan.kept if cut is not None and i >= cut]
        late = [m for m in appended if m.message.kind != "memory_update"]
        keep += [m.id for m in late]
        evicted = plan.evicted_count + (len(appended) - len(late))
        kept_messages = [*plan.kept_messages, *(m.message for m in late)]
        packaged = summary_message_for(outcome.summary, plan.mode, evicted)
        stats = replace(
            outcome.stats,
            messages_count_before=len(planned) + len(appended),
            messages_count_after=1 + len(kept_messages),
            context_tokens_after=estimate_text(outcome.summary) + estimate_messages(kept_messages),
        )
        prompt = await self._recompile(conversation_id, 1 + len(kept_messages))
        tokens_before = fixed + estimate_messages([m.message for m in (*planned, *appended)])
        tokens_after = (
            system_prompt_tokens(prompt.content)
            + self._tool_tokens
            + estimate_message(packaged)
            + estimate_messages(kept_messages)
        )
        replaced = estimate_messages([m.message for m in (*planned, *appended)]) - estimate_messages(kept_messages)
        summary_tokens = estimate_message(packaged)
        if outcome.status == "done" and summary_tokens >= replaced:
            return await self._not_smaller(conversation_id, compaction_id, stats.trigger, plan, replaced, summary_tokens)
        metadata: dict[str, Any] = {
            "compaction": {
                "summary": outcome.summary,
                "stats": stats.as_dict(),
                "mode": plan.mode,
                "status": outcome.status,
                "model": outcome.model,
                "attempts": len(outcome.attempts),
                "background": background,
            }
        }
        with anyio.CancelScope(shield=True):
            stored = await self.store.replace_in_context(
                conversation_id,
                packaged,
                keep,
                metadata=metadata,
                turn_id=turn_id,
                prompt=prompt,
                rearm=[AGENT_INFO_KEY],
            )
            for original, message in zip(copy_of, copies, strict=True):
                await self.store.append_message(
                    conversation_id, message, turn_id=turn_id, metadata={"copy_of": original, "cut": True}
                )
        result = CompactionResult(
            status=outcome.status,
            trigger=stats.trigger,
            mode=plan.mode,
            evicted=evicted,
            tokens_before=tokens_before,
            tokens_after=tokens_after,
            messages_before=stats.messages_count_before,
            messages_after=stats.messages_count_after,
            summary=outcome.summary,
            summary_message_id=stored.id,
            background=background,
            error=outcome.error,
        )
        if outcome.status == "done":
            event: Event = CompactionDone(
                plan.mode,
                evicted,
                tokens_before,
                tokens_after,
                stored.id,
                {**stats.as_dict(), "background": background},
                compaction_id,
            )
        else:
            event = CompactionFailed(outcome.error or "the summarizer failed", evicted, compaction_id, stats.trigger)
        await self._end(event, conversation_id)
        return result

    async def _not_smaller(
        self,
        conversation_id: str,
        compaction_id: str,
        trigger: str,
        plan: CompactionPlan,
        replaced: int,
        summary: int,
    ) -> CompactionResult:
        """A summary no smaller than the messages it replaces: nothing is applied (``skipped``, with
        the reason as ``error``), and its ``compaction.failed`` says so."""
        # deferred: compaction's events load with the first compaction (P1)
        from orchestrator.base.subagent_events import CompactionFailed

        reason = f"the summary ({summary} tokens) is not smaller than the messages it replaces ({replaced} tokens)"
        event = CompactionFailed(f"{trigger}: {reason}; nothing applied", 0, compaction_id, trigger)
        await self._end(event, conversation_id)
        count = plan.messages_before
        return CompactionResult(
            "skipped", trigger, plan.mode, 0, plan.tokens_before, plan.tokens_before, count, count, error=reason
        )

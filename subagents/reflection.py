"""The reflection subagent (TURN-5.15; R1-R6, S12, S16, S17).

After each turn the coordinator asks the trigger policy (``subagents.triggers``) whether the
conversation's unreflected transcript should be reflected on. A launch creates a worktree of the
agent's memory on a branch ``reverie/reflection/<ts>-<id8>``, writes the transcript slice to a
read-only payload file (``TRANSCRIPT_PATH``), and runs a small agent loop with
``prompts/reflection.md`` and file and shell tools confined to the worktree; the loop
(``subagents.reflection_reader``, D5) reads the transcript in slices and stays within the window. Its commits go through
the same pre-commit hook as the main agent's. Finalisation rebases onto the parent's HEAD and
fast-forwards under the per-repository lock (``orchestrator.memfs.merge``); a conflict, a dirty
parent or a failure keeps the branch, records it and reminds the launching conversation (S12).
The parent's branch is watched across the run (``orchestrator.memfs.parent``): one the reflection
moved is put back before merge-back, with a ``memory.warning``.

Choices: one reflection per agent at a time in this process; a launch declined because one runs,
or because the parent checkout is dirty, leaves the trigger pending for the next turn. A dirty
checkout can hold every reflection back for as long as it stays dirty, and only the user may know
why it is, so that case is a ``reflection.held`` warning the terminal shows, once per condition
(O12). The reflection loop's step limit grows with the transcript (``reflection_reader.BASE_STEPS``
plus two per slice). Nothing here raises into the main agent's turn; failures are recorded and counted for
the backoff of S17. The trigger policy, the reader and reflection's events load at the first turn
end, after a chat's first request (P1).
"""

from __future__ import annotations

import math
import os
import stat
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import replace
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, cast

import anyio

from orchestrator.agent.budget import BudgetedModel, Meter
from orchestrator.agent.context import ReadsSessionContext, SessionContext
from orchestrator.agent.turn import TurnOutcome, TurnRunner
from orchestrator.base import blocking
from orchestrator.base.errors import ReverieError, error_line
from orchestrator.base.events import Event, MemoryWarning, ModelCalled, Publisher
from orchestrator.base.limits import LimitReached, Prices, limits_for
from orchestrator.base.paths import reverie_home
from orchestrator.base.processes import pid_alive
from orchestrator.compaction import estimate_text, tool_schema_tokens
from orchestrator.memfs.lockowner import holding_as
from orchestrator.memfs.provenance import Provenance, trailers_env
from orchestrator.memfs.repo import repo_status
from orchestrator.memfs.tidy import nothing_to_recover
from orchestrator.models.metered import MeteredModel
from orchestrator.runtime.plugins import Spawner
from orchestrator.store import ReflectionRecord, StoredMessage, utc_now
from orchestrator.tools import ToolContext, tool_specs
from prompts import load_prompt

if TYPE_CHECKING:
    from orchestrator.memfs.merge import MergeOutcome
    from orchestrator.memfs.resolution import Resolver
    from orchestrator.memfs.worktrees import Worktree
    from orchestrator.store import Store
    from subagents.reflection_merge import BranchRetrier

__all__ = ["ReflectionCoordinator", "ReflectionError", "recover_reflections", "render_transcript"]

_TOOLS = ("bash", "read_file", "write_file", "edit_file")
_HELD_PATHS = 5
_LOCK_SOURCE = "reflection merge"
"""What a merge-back of a reflection is called in the repository lock's owner record (V7)."""


class ReflectionError(ReverieError, RuntimeError):
    """A reflection gave up (its step limit); recorded as the reflection's failure, never raised into a turn."""


def render_transcript(messages: Sequence[StoredMessage]) -> str:
    """One block per message, ``[role] text``; tool calls and results are shown by name. A message
    dated otherwise than by when it was stored (replayed history: ``created_at`` in its metadata)
    is preceded by ``[date] <when>`` each time that date changes, so a reflection can tell when
    things were said.

    What the harness put into the context is left out: reminders, memory updates and compaction
    summaries (letta-code's transcript holds the turns' own lines only, TURN-5.2). A summary
    restates messages that are in the transcript word for word; stored with the user's role, it
    read as something the user said, and once compaction runs on most turns (a long session whose
    core memory fills the window) the summaries were most of what a reflection read: 2.9 to 4.7
    reflection model calls per launch over bench/soak.py's 10,000 turns."""
    lines: list[str] = []
    dated: object = None
    for stored in messages:
        m = stored.message
        if m.kind in {"reminder", "memory_update", "summary"}:
            continue
        when = stored.metadata.get("created_at")
        if isinstance(when, str) and when != dated:
            lines.append(f"[date] {when}")
            dated = when
        if m.role == "tool":
            lines.append(f"[tool {m.name or ''}] {m.content[:2000]}")
            continue
        if m.content.strip():
            lines.append(f"[{m.role}] {m.content}")
        for call in m.tool_calls:
            lines.append(f"[{m.role} calls {call.name}] {call.arguments[:2000]}")
    return "\n".join(lines) + "\n"


def _steps(messages: Sequence[StoredMessage]) -> int:
    return sum(1 for m in messages if m.message.role == "assistant" and m.message.content.strip())


class ReflectionCoordinator(ReadsSessionContext):
    """Decides, launches and finishes reflections for one agent's conversations."""

    def __init__(
        self,
        *,
        context: SessionContext,
        supervisor: Spawner,
        resolver: Resolver | None = None,
        idle_wait: Callable[[float], Awaitable[None]] = anyio.sleep,
    ) -> None:
        self.context = context
        self.supervisor = supervisor
        self.resolver = resolver
        self.idle_wait = idle_wait
        """How the session waits out an idle spell (``anyio.sleep``; tests give one they release)."""
        self._active = False
        self._retrier: BranchRetrier | None = None
        self._idle_scope: anyio.CancelScope | None = None

    @property
    def retrier(self) -> BranchRetrier:
        """D2's retries of waiting branches, built at the first turn end (merge-back is imported then,
        not before a chat's first request)."""
        if self._retrier is None:
            # deferred: merge-back and its validator load after the first reply (P1)
            from subagents.reflection_merge import BranchRetrier

            self._retrier = BranchRetrier(
                store=self.store, agent_id=self.agent.agent_id, memory_dir=self.agent.memory_dir, emit=self._emit,
                resolver=self.resolver,
            )
        return self._retrier

    @property
    def active(self) -> bool:
        return self._active

    async def on_event(self, event: Event, conversation_id: str | None) -> None:
        """Compaction events arm the trigger (and lift a failure pause, S17); a turn's start ends
        the idle spell the last turn's end began."""
        if event.kind == "turn.start":
            self._stop_idle_watch()
        elif event.kind == "compaction.done" and conversation_id:
            # deferred (here and below): see the module docstring
            from subagents.triggers import after_compaction

            await self.store.update_reflection_state(conversation_id, self.agent.agent_id, after_compaction)

    async def after_turn(self, runner: TurnRunner, outcome: TurnOutcome) -> None:
        try:
            await self._after_turn(outcome)
        finally:
            self._watch_idle(outcome.conversation_id)

    async def _after_turn(self, outcome: TurnOutcome) -> None:
        records, state = await self.store.reflections_and_state(self.agent.agent_id, outcome.conversation_id)
        # merge-back is imported only when there is a branch to retry: a one-shot rarely has one
        retried = await self.retrier.retry(turn_end=True, records=records) if any(r.retryable for r in records) else []
        if self.settings.reflection_trigger == "off":
            # Off never launches at a turn end; the only effect maybe_launch could have is settling
            # an armed compaction flag, so the transcript is read only when the flag is set.
            if retried:
                state = await self.store.reflection_state(outcome.conversation_id, self.agent.agent_id)
            if not state.compaction_pending:
                return
        await self.maybe_launch(outcome.conversation_id)

    async def idle(self, conversation_id: str, seconds: float) -> str | None:
        """The session has been idle ``seconds``: a wait between turns, or the recorded gap between
        two sessions of a replayed history. A trigger that asks to be consulted after that long
        (``triggers.idle_after``) is; the reason for what happened, or None when none asks."""
        # deferred: see the module docstring
        from subagents.triggers import idle_after

        wanted = idle_after(self.settings)
        if wanted is None or seconds < wanted:
            return None
        return await self.maybe_launch(conversation_id, idle_seconds=seconds)

    def _watch_idle(self, conversation_id: str) -> None:
        """After a turn: if the trigger asks to be consulted once the session has been idle a while,
        wait that long (``idle_wait``) unless the next turn starts first, then ask it."""
        # deferred: see the module docstring
        from subagents.triggers import idle_after

        self._stop_idle_watch()
        wanted = idle_after(self.settings)
        if wanted is None:
            return
        scope = self._idle_scope = anyio.CancelScope()

        async def watch() -> None:
            with scope:
                await self.idle_wait(wanted)
                self._idle_scope = None
                await self.idle(conversation_id, wanted)

        self.supervisor.watch(f"idle watch of {conversation_id}", watch)

    def _stop_idle_watch(self) -> None:
        if self._idle_scope is not None:
            self._idle_scope.cancel()
            self._idle_scope = None

    async def relaunch_interrupted(self) -> str | None:
        """L2: a reflection the last session's end interrupted (``interrupted``, nothing committed:
        start-up recovery merges what one did commit) is launched again for its conversation, as a
        ``relaunch``, and its record says so (``relaunched``). One conversation a session, since one
        reflection of an agent runs at a time; the others wait for the next. Returns why, or None
        when nothing waited."""
        records = await self.store.reflections(self.agent.agent_id)
        waiting = [r for r in records if r.status == "interrupted" and r.conversation_id]
        if not waiting:
            return None
        conversation_id = cast(str, waiting[-1].conversation_id)
        reason = await self.maybe_launch(conversation_id, manual=True, trigger="relaunch")
        if reason in ("manual", "nothing to reflect on"):
            for record in (r for r in waiting if r.conversation_id == conversation_id):
                await self.store.save_reflection(replace(record, status="relaunched", reason=f"{record.reason}; relaunched ({reason})"))
        return reason

    async def retry_waiting(self, *, turn_end: bool = True) -> None:
        """D2: pending branches are retried at every turn end (and start-up); kept ones once HEAD moved."""
        await self.retrier.retry(turn_end=turn_end)

    async def maybe_launch(
        self, conversation_id: str, *, manual: bool = False, idle_seconds: float = 0.0, trigger: str = "manual"
    ) -> str:
        """Launch if the trigger says so (after ``idle_seconds`` of an idle session, see ``idle``);
        returns the reason for what happened. A ``manual`` launch is recorded under ``trigger``."""
        # deferred: reflection's trigger policy loads at the first turn end (P1)
        from subagents.triggers import Moment, after_success, decide_launch

        state = await self.store.reflection_state(conversation_id, self.agent.agent_id)
        slice_ = await self.store.transcript(conversation_id, state.reflected_through_seq)
        steps = _steps(slice_)
        mode = self.settings.reflection_trigger
        decision = decide_launch(self.settings, state, Moment(steps, idle_seconds), manual=manual)
        if not decision.launch:
            if state.compaction_pending and steps == 0:
                await self.store.update_reflection_state(
                    conversation_id, self.agent.agent_id, lambda now: after_success(now, now.reflected_through_seq)
                )
            return decision.reason
        if self._active:
            return "a reflection is already running for this agent"
        # The flag is set and cleared in this one try/finally: whatever fails or is cancelled before
        # the run is handed to the supervisor (whose task clears it when the run ends) clears it here.
        self._active = True
        handed_off = False
        try:
            status = await blocking.run_sync("git", partial(repo_status, self.agent.memory_dir))
            if status.in_conflict:
                reason = f"the memory repository has an unfinished operation ({status.operation or 'conflicted files'})"
                return await self._held(conversation_id, reason, "conflict", status.conflicted, manual=manual)
            if status.dirty:
                paths = tuple(line[3:] for line in status.porcelain)
                return await self._held(conversation_id, "the memory repository has uncommitted changes", "dirty", paths, manual=manual)
            await self._launch(conversation_id, slice_, steps, trigger if manual else mode)
            handed_off = True
            return decision.reason
        finally:
            if not handed_off:
                self._active = False

    async def _held(self, conversation_id: str, reason: str, code: str, paths: Sequence[str], *, manual: bool) -> str:
        """A launch held back by the main checkout: ``reflection.held`` once per condition, so the
        user learns why reflection stopped without a line every turn. Again only after a launch or
        for another reason; asked of the event log, so a run of one-shot chats says it once too. A
        manual request prints the returned reason itself."""
        # deferred: see the module docstring
        from orchestrator.base.subagent_events import ReflectionHeld, ReflectionLaunched

        if not manual:
            last = await self.store.last_event(agent_id=self.agent.agent_id, kinds=(ReflectionHeld.kind, ReflectionLaunched.kind))
            if last is None or last.kind != ReflectionHeld.kind or last.payload.get("reason_code") != code:
                await self._emit(ReflectionHeld(reason, code, tuple(paths[:_HELD_PATHS])), conversation_id)
        return reason

    async def _launch(self, conversation_id: str, slice_: list[StoredMessage], steps: int, trigger: str) -> None:
        """Create the worktree, record the run and hand it to the supervisor.

        Until the hand-off this method owns the worktree: on any failure or cancellation it removes
        it (shielded) and settles the run as ``failed``, so nothing is left behind and a launch that
        could not start is a recorded outcome with a ``reflection.failed`` warning, never a silent
        skip. The error itself still propagates (the supervisor records it; a cancellation goes on).
        """
        # deferred: worktrees load with the first launch, not before a chat's first request
        from orchestrator.base.subagent_events import ReflectionLaunched
        from orchestrator.memfs.worktrees import branch_for, create_worktree, new_worktree_id

        wid = new_worktree_id()
        record = ReflectionRecord(
            id=wid,
            agent_id=self.agent.agent_id,
            conversation_id=conversation_id,
            branch=branch_for(wid, "reflection"),
            trigger=trigger,
            status="running",
            reason=None,
            base_revision=None,
            through_seq=slice_[-1].seq,
            from_seq=slice_[0].seq - 1,
            commits=(),
            files=(),
            created_at=utc_now(),
            updated_at=utc_now(),
            owner_pid=os.getpid(),
            review=self.settings.reflection_merge == "review",
        )
        worktree: Worktree | None = None
        try:
            worktree = await create_worktree(
                self.agent.memory_dir, agent_id=self.agent.agent_id, kind="reflection", worktree_id=wid
            )
            record = replace(record, base_revision=worktree.base_revision)
            await self.store.save_reflection(record)
            await self._emit(ReflectionLaunched(worktree.id, worktree.branch, trigger), conversation_id)
            self.supervisor.spawn(
                f"reflection {worktree.id}",
                partial(self._run, worktree, record, slice_, steps),
                seconds=limits_for(self.settings, "reflection").seconds,
            )
        except BaseException as exc:
            with anyio.CancelScope(shield=True):
                await self._abandon(record, worktree, exc, steps)
            raise

    async def _abandon(self, record: ReflectionRecord, worktree: Worktree | None, exc: BaseException, steps: int) -> None:
        """A launch that failed before its hand-off: remove the worktree, record the failure."""
        # deferred: as merge-back, after a chat's first request
        from orchestrator.memfs.merge import MergeOutcome, finalize_worktree

        if worktree is not None:
            with holding_as(_LOCK_SOURCE):
                outcome = await finalize_worktree(self.agent.memory_dir, worktree, succeeded=False)
        else:
            outcome = MergeOutcome("no_changes", None, record.branch, (), (), None)
        cancelled = isinstance(exc, anyio.get_cancelled_exc_class())
        error = "cancelled while starting" if cancelled else f"could not start: {error_line(exc)}"
        await self._finish(record, outcome, error, steps)

    async def _emit(self, event: Event, conversation_id: str | None) -> None:
        await self.context.publish(event, conversation_id)

    async def _run(self, worktree: Worktree, record: ReflectionRecord, slice_: list[StoredMessage], steps: int) -> None:
        # deferred: merge-back loads when a reflection runs, not before a chat's first request
        from orchestrator.base.subagent_events import ReflectionMerging
        from orchestrator.memfs.merge import finalize_worktree
        from orchestrator.memfs.parent import settle as settle_parent
        from orchestrator.memfs.parent import watch

        conversation_id = cast(str, record.conversation_id)
        payload: Path | None = None
        outcome: MergeOutcome | None = None
        error: str | None = None
        limit: LimitReached | None = None
        held = False
        try:
            try:
                payload = await blocking.run_sync(
                    "files", partial(self._write_payload, worktree.id, conversation_id, render_transcript(slice_))
                )
                watched = await watch(worktree.path, f"reflection-{worktree.id}")
                try:
                    await self._reflect(worktree, payload, conversation_id, record.trigger)
                finally:
                    with anyio.CancelScope(shield=True):
                        displaced = await settle_parent(watched, own_branch=worktree.branch)
                        if displaced is not None:
                            await self._emit(MemoryWarning(displaced.message), conversation_id)
            except LimitReached as exc:
                limit, error = exc, str(exc)
                await self._emit(exc.event(worktree.id), conversation_id)
            except Exception as exc:
                error = f"{type(exc).__name__}: {exc}"
            with anyio.CancelScope(shield=True):
                if error is None and self.settings.reflection_merge == "review":
                    outcome = await self._hold(worktree, record)
                    held = outcome is None
                    return
                await self._emit(ReflectionMerging(worktree.id), conversation_id)
                with holding_as(_LOCK_SOURCE):
                    outcome = await finalize_worktree(
                        self.agent.memory_dir, worktree, succeeded=error is None, resolver=self.resolver
                    )
        finally:
            with anyio.CancelScope(shield=True):
                interrupted = outcome is None and not held and error is None and self.supervisor.leaving
                if outcome is None and not held:
                    with holding_as(_LOCK_SOURCE):
                        outcome = await finalize_worktree(self.agent.memory_dir, worktree, succeeded=False)
                    error = error or "cancelled"
                try:
                    if interrupted and outcome is not None:
                        await self._interrupted(record, outcome)
                    elif outcome is not None:
                        await self._finish(record, outcome, error, steps, limit=limit)
                finally:
                    self._active = False
                    if payload is not None:
                        await blocking.run_sync("files", partial(payload.unlink, missing_ok=True))

    async def _reflect(self, worktree: Worktree, payload: Path, conversation_id: str, trigger: str) -> None:
        # deferred: the compiler loads with the first compile, not before a chat's first request
        from orchestrator.agent.audit import compile_audited
        from subagents.reflection_reader import ReflectionUnfinished, plan_reading, run_reading_loop

        audited = await blocking.run_sync("git", partial(compile_audited, worktree.path, "{CORE_MEMORY}", agent_id=self.agent.agent_id))
        system = load_prompt("reflection").replace("{CORE_MEMORY}", audited.compiled.core_memory)
        transcript = await blocking.run_sync("files", partial(payload.read_text, encoding="utf-8"))
        specs = tool_specs(list(_TOOLS))
        window = self.settings.context_window
        plan = plan_reading(
            payload, transcript, window=window, fixed_tokens=estimate_text(system) + tool_schema_tokens(specs) + 200
        )
        ctx = ToolContext.from_settings(
            self.settings,
            workspace=worktree.path,
            agent_id=self.agent.agent_id,
            conversation_id=conversation_id,
            agent_name=f"{self.agent.name} (reflection)",
            memory_dir=worktree.path,
            extra_env={
                "TRANSCRIPT_PATH": str(payload),
                **trailers_env(Provenance("reflection", self.agent.agent_id, conversation_id, reflection=worktree.id, trigger=trigger)),
            },
            read_roots=(payload.parent,),
        )

        async def counted(event: ModelCalled) -> None:
            await self._emit(event, conversation_id)

        limits = limits_for(self.settings, "reflection")
        if self.settings.limit_reflection_tokens is None and limits.tokens is not None:
            # B2: the derived default never cuts a reading plan short (each step is one window at most)
            limits = replace(limits, tokens=max(limits.tokens, plan.max_steps * window))
        meter = Meter(limits, Prices.of(self.settings), parent=self.context.meter)
        try:
            with anyio.move_on_after(limits.seconds if limits.seconds is not None else math.inf) as clock:
                await run_reading_loop(
                    BudgetedModel(MeteredModel(self.model, counted), meter, window=window),
                    system=system,
                    plan=plan,
                    ctx=ctx,
                    tools=specs,
                    window=window,
                    model_name=self.settings.model,
                )
        except ReflectionUnfinished as exc:
            raise ReflectionError(str(exc)) from None
        if clock.cancelled_caught and limits.seconds is not None:
            raise LimitReached("reflection.seconds", limits.seconds, meter.spent("seconds"))

    async def _hold(self, worktree: Worktree, record: ReflectionRecord) -> MergeOutcome | None:
        """V1: keep the finished run's branch for a person instead of merging it; None once it is held
        and settled here. A run that committed nothing returns ``no_changes``, for ``_finish`` to
        settle as a merged run's would be."""
        # deferred: as merge-back, after a chat's first request
        from orchestrator.memfs.merge import MergeOutcome
        from orchestrator.memfs.review import hold_worktree
        from subagents.reflection_review import hold
        from subagents.triggers import after_success

        held = await hold_worktree(self.agent.memory_dir, worktree)
        if held is None:
            return MergeOutcome("no_changes", None, worktree.branch, (), (), None)
        await hold(self.store, self._emit, record, held)
        await self.store.update_reflection_state(
            cast(str, record.conversation_id), self.agent.agent_id, partial(after_success, through_seq=record.through_seq)
        )
        return None

    async def _finish(
        self,
        record: ReflectionRecord,
        outcome: MergeOutcome,
        error: str | None,
        steps: int,
        *,
        limit: LimitReached | None = None,
    ) -> None:
        # deferred: as merge-back, after a chat's first request
        from subagents.reflection_merge import settle
        from subagents.triggers import after_failure, after_success

        conversation_id = cast(str, record.conversation_id)
        saved = await settle(self.store, self._emit, record, outcome, error, limit=limit)
        if saved.status in {"merged", "resolved", "no_changes", "pending", "kept_conflict", "kept_invalid"}:
            change = partial(after_success, through_seq=record.through_seq)
        else:
            change = partial(after_failure, unreflected_steps=steps)
        await self.store.update_reflection_state(conversation_id, self.agent.agent_id, change)

    async def _interrupted(self, record: ReflectionRecord, outcome: MergeOutcome) -> None:
        """L2: cut short by its session's end: recorded ``interrupted``, what it committed kept on
        its branch, the transcript left unreflected and no failure counted, for the next session."""
        # deferred: as merge-back, after a chat's first request
        from subagents.reflection_merge import settle_interrupted

        await settle_interrupted(self.store, self._emit, record, outcome)

    def _write_payload(self, reflection_id: str, conversation_id: str, text: str) -> Path:
        folder = reverie_home() / "transcripts" / self.agent.agent_id / conversation_id
        folder.mkdir(parents=True, exist_ok=True)
        path = folder / f"payload-auto-{reflection_id}.txt"
        path.write_text(text, encoding="utf-8")
        os.chmod(path, stat.S_IRUSR | stat.S_IRGRP)
        return path


async def recover_reflections(store: Store, agent_id: str, memory_dir: Path) -> list[ReflectionRecord]:
    """R6 at agent load: reconcile git (prune, abort half-done rebases, release stale locks) and the
    store. Runs of live processes are spared; a run whose process died keeps its branch, and every
    unmerged reflection branch is recorded as ``kept_recovered`` (waiting: retried like pending).
    Returns the records that are pending afterwards."""
    records = await store.reflections(agent_id)
    if not records and await blocking.run_sync("git", partial(nothing_to_recover, memory_dir)):
        return []
    # deferred: the full reconciliation loads only when there is something to recover
    from orchestrator.memfs.recovery import recover
    from subagents.reflection_merge import BranchRetrier

    live = {r.id for r in records if r.status == "running" and r.owner_pid != os.getpid() and pid_alive(r.owner_pid)}
    report = await recover(memory_dir, active=live)
    pending = {b.branch: b for b in report.pending if b.branch.startswith("reverie/reflection/")}
    known = {r.branch: r for r in records}
    for record in records:
        if record.status == "running" and record.id not in live and record.owner_pid != os.getpid():
            status = "kept_recovered" if record.branch in pending else "failed"
            if status == "kept_recovered" and record.review:
                status = "kept_review"  # V1: a run that died under review waits for a person too
            await store.save_reflection(replace(record, status=status, reason=record.reason or "interrupted"))
            if status in ("failed", "kept_review"):
                # its process died before the launch's one outcome; a kept branch gets it when retried
                await _outcome_of_dead_run(store, agent_id, record, held=status == "kept_review")
    for record in records:
        if record.status == "interrupted" and record.commits:
            # L2: what the interrupted run committed merges now; a run that committed nothing is relaunched
            await store.save_reflection(replace(record, status="kept_recovered"))
    for branch, item in pending.items():
        if branch not in known:
            await store.save_reflection(
                ReflectionRecord(
                    id=item.id,
                    agent_id=agent_id,
                    conversation_id=None,
                    branch=branch,
                    trigger="recovered",
                    status="kept_recovered",
                    reason="found unmerged at start-up",
                    base_revision=None,
                    through_seq=0,
                    commits=(item.tip,),
                    files=(),
                    created_at=utc_now(),
                    updated_at=utc_now(),
                )
            )
    # D2: pending (and recovered) branches are retried at process start, as at every turn end.
    await BranchRetrier(store=store, agent_id=agent_id, memory_dir=memory_dir, emit=Publisher(store, agent_id)).retry(
        turn_end=False
    )
    return [r for r in await store.reflections(agent_id) if r.kept]


async def _outcome_of_dead_run(store: Store, agent_id: str, record: ReflectionRecord, *, held: bool = False) -> None:
    # deferred: reflection's events load with the first one published (P1)
    from orchestrator.base.subagent_events import ReflectionOutcome

    error = "interrupted: the process running it ended"
    outcome = ReflectionOutcome(record.id, record.branch, "review", reason=error, reason_code="review") if held else (
        ReflectionOutcome(record.id, record.branch, "failed", error=error)
    )
    await Publisher(store, agent_id)(outcome, record.conversation_id)

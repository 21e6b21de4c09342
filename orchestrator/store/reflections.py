"""Reflection bookkeeping in the store (TURN-5.15): per-conversation trigger state and one
record per reflection run, so pending branches survive restarts and ``reverie reflections`` can list,
merge or discard them (R2, S16, S17)."""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from functools import partial
from typing import Any, TypeVar

from orchestrator.store.records import utc_now

__all__ = [
    "RETRYABLE_QUERY",
    "RETRYABLE_STATUSES",
    "WAITING_STATUSES",
    "AfterTurnRead",
    "ReflectionRecord",
    "ReflectionRecords",
    "ReflectionState",
    "read_reflections_and_state",
]

T = TypeVar("T")

_STATE_COLUMNS = "conversation_id, agent_id, reflected_through_seq, compaction_pending, consecutive_failures, failed_at_step, paused"
_RECORD_COLUMNS = (
    "id, agent_id, conversation_id, branch, trigger, status, reason, base_revision, through_seq, commits, files, "
    "created_at, updated_at, owner_pid, reason_code, error, details"
)


@dataclass(frozen=True)
class ReflectionState:
    """A conversation's reflection bookkeeping: how far it was reflected, and the failure backoff."""

    conversation_id: str
    agent_id: str
    reflected_through_seq: int = 0
    compaction_pending: bool = False
    consecutive_failures: int = 0
    failed_at_step: int = 0
    paused: bool = False


@dataclass(frozen=True)
class ReflectionRecord:
    """One reflection launch and its D2 outcome.

    ``status``: ``running``; settled: ``merged``, ``resolved``, ``no_changes``, ``kept_conflict``,
    ``kept_invalid``, ``kept_failed``, ``failed``, ``discarded``; waiting: ``pending`` (retried at
    every turn end and start-up), ``kept_recovered`` (found unmerged at start-up; retried like
    pending) and ``kept_dirty`` (older stores; retried like pending). ``reason_code`` is D2's code
    beside the S12 ``reason`` text; ``error`` the error of a failed run. ``owner_pid``: the process
    running it, so start-up recovery spares live runs of other processes. ``retried``: how often
    ``HEAD`` moved under a merge attempt; ``pending_turns``: turn ends it has waited; ``kept_head``:
    ``HEAD`` when it was kept on a conflict (retried once ``HEAD`` moves on). ``kept_review``: held
    for a person (V1); ``decision`` (``merge``/``discard``), ``decided_by``, ``decided_why`` and
    ``decided_at`` say who decided and why; ``from_seq``: the transcript it drew on starts after it;
    ``review``: launched under ``merge = review``, so a run that died is held too, never merged.
    """

    id: str
    agent_id: str
    conversation_id: str | None
    branch: str
    trigger: str
    status: str
    reason: str | None
    base_revision: str | None
    through_seq: int
    commits: tuple[str, ...]
    files: tuple[str, ...]
    created_at: str
    updated_at: str
    owner_pid: int | None = None
    reason_code: str | None = None
    error: str | None = None
    retried: int = 0
    pending_turns: int = 0
    kept_head: str | None = None
    resolved_files: tuple[str, ...] = ()
    from_seq: int = 0
    decision: str | None = None
    decided_by: str | None = None
    decided_why: str | None = None
    decided_at: str | None = None
    review: bool = False

    @property
    def kept(self) -> bool:
        return self.status.startswith("kept_")

    @property
    def waiting(self) -> bool:
        """Not settled yet: merge-back is retried for it (D2)."""
        return self.status in WAITING_STATUSES

    @property
    def retryable(self) -> bool:
        """Merge-back is tried again for it: waiting, or kept over a conflict with an older HEAD (D2)."""
        return self.waiting or self.status == "kept_conflict"

    @property
    def outcome(self) -> str:
        """D2's outcome name: ``kept_conflict`` -> ``kept``, ``kept_recovered`` -> ``pending``."""
        if self.waiting:
            return "pending"
        return "kept" if self.kept else self.status


WAITING_STATUSES = frozenset({"pending", "kept_recovered", "kept_dirty"})


def _record(row: Sequence[Any]) -> ReflectionRecord:
    details = json.loads(row[16] or "{}")
    return ReflectionRecord(
        id=row[0],
        agent_id=row[1],
        conversation_id=row[2],
        branch=row[3],
        trigger=row[4],
        status=row[5],
        reason=row[6],
        base_revision=row[7],
        through_seq=row[8],
        commits=tuple(json.loads(row[9])),
        files=tuple(json.loads(row[10])),
        created_at=row[11],
        updated_at=row[12],
        owner_pid=row[13],
        reason_code=row[14],
        error=row[15],
        retried=int(details.get("retried", 0)),
        pending_turns=int(details.get("pending_turns", 0)),
        kept_head=details.get("kept_head"),
        resolved_files=tuple(details.get("resolved_files", ())),
        from_seq=int(details.get("from_seq", 0)),
        decision=details.get("decision"),
        decided_by=details.get("decided_by"),
        decided_why=details.get("decided_why"),
        decided_at=details.get("decided_at"),
        review=bool(details.get("review", False)),
    )


AfterTurnRead = tuple[list[ReflectionRecord], ReflectionState]
"""What ``reflections_and_state`` returns: the agent's records and the conversation's trigger state."""


RETRYABLE_STATUSES = WAITING_STATUSES | {"kept_conflict"}
"""The records a turn end may retry (D2): the only ones ``reflections_and_state`` returns, so its
cost does not grow with every reflection the agent ever settled (bench/soak.py: 3,000 and more)."""
_RETRYABLE_SQL = ", ".join(f"'{status}'" for status in sorted(RETRYABLE_STATUSES))
RETRYABLE_QUERY = (
    f"SELECT {_RECORD_COLUMNS} FROM reflections WHERE agent_id = ? AND status IN ({_RETRYABLE_SQL}) "
    "ORDER BY created_at, id"
)
"""One agent's retryable records, through the partial index ``reflections_retryable`` (schema V3)."""


def read_reflections_and_state(conn: sqlite3.Connection, agent_id: str, conversation_id: str) -> AfterTurnRead:
    """``reflections_and_state``'s two reads, for a job that already holds the connection."""
    rows = conn.execute(RETRYABLE_QUERY, (agent_id,)).fetchall()
    return [_record(r) for r in rows], _read_state(conn, conversation_id, agent_id)


def _read_state(conn: sqlite3.Connection, conversation_id: str, agent_id: str) -> ReflectionState:
    row = conn.execute(
        f"SELECT {_STATE_COLUMNS} FROM reflection_state WHERE conversation_id = ?", (conversation_id,)
    ).fetchone()
    if row is None:
        return ReflectionState(conversation_id, agent_id)
    return ReflectionState(row[0], row[1], row[2], bool(row[3]), row[4], row[5], bool(row[6]))


def _write_state(conn: sqlite3.Connection, state: ReflectionState) -> None:
    conn.execute(
        f"INSERT OR REPLACE INTO reflection_state({_STATE_COLUMNS}, updated_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
        (
            state.conversation_id,
            state.agent_id,
            state.reflected_through_seq,
            int(state.compaction_pending),
            state.consecutive_failures,
            state.failed_at_step,
            int(state.paused),
            utc_now(),
        ),
    )


class ReflectionRecords:
    """Mixed into ``Store``; every method is one job on the store's connection worker.

    The trigger state is changed with ``update_reflection_state``: the read, the change and the
    write are one transaction, because the coordinator changes it from two tasks at once (a
    compaction's event during a turn, a reflection's finish in the background); a read in one job
    and a write in another lost one of the two changes (a finished reflection's progress undone by
    a compaction that read the state before it, so the next reflection read the same slice again)."""

    _run: Callable[[Callable[[sqlite3.Connection], Any]], Awaitable[Any]]

    async def reflection_state(self, conversation_id: str, agent_id: str) -> ReflectionState:
        result: ReflectionState = await self._run(partial(_read_state, conversation_id=conversation_id, agent_id=agent_id))
        return result

    async def reflections_and_state(
        self, agent_id: str, conversation_id: str
    ) -> tuple[list[ReflectionRecord], ReflectionState]:
        """The agent's retryable reflection records (``RETRYABLE_STATUSES``) and the conversation's
        trigger state in one job: what a turn end reads when it has nothing to retry or launch (one
        store round trip, not two)."""
        result: AfterTurnRead = await self._run(lambda conn: read_reflections_and_state(conn, agent_id, conversation_id))
        return result

    async def update_reflection_state(
        self, conversation_id: str, agent_id: str, change: Callable[[ReflectionState], ReflectionState]
    ) -> ReflectionState:
        """Apply ``change`` (a pure function, run in the store's lane) to the stored state in one
        transaction; returns the state written."""

        def job(conn: sqlite3.Connection) -> ReflectionState:
            conn.execute("BEGIN IMMEDIATE")
            try:
                state = change(_read_state(conn, conversation_id, agent_id))
                _write_state(conn, state)
            except BaseException:
                conn.execute("ROLLBACK")
                raise
            conn.execute("COMMIT")
            return state

        result: ReflectionState = await self._run(job)
        return result

    async def save_reflection_state(self, state: ReflectionState) -> None:
        """Replace the stored state (for a caller that owns it whole: tests, tools)."""
        await self.update_reflection_state(state.conversation_id, state.agent_id, lambda _old: state)

    async def save_reflection(self, record: ReflectionRecord) -> None:

        def job(conn: sqlite3.Connection) -> None:
            conn.execute("BEGIN IMMEDIATE")
            try:
                conn.execute(
                    f"INSERT OR REPLACE INTO reflections({_RECORD_COLUMNS}) VALUES ({', '.join('?' * 17)})",
                    (
                        record.id,
                        record.agent_id,
                        record.conversation_id,
                        record.branch,
                        record.trigger,
                        record.status,
                        record.reason,
                        record.base_revision,
                        record.through_seq,
                        json.dumps(list(record.commits)),
                        json.dumps(list(record.files), ensure_ascii=False),
                        record.created_at,
                        utc_now(),
                        record.owner_pid,
                        record.reason_code,
                        record.error,
                        json.dumps(
                            {
                                "retried": record.retried,
                                "pending_turns": record.pending_turns,
                                "kept_head": record.kept_head,
                                "resolved_files": list(record.resolved_files),
                                "from_seq": record.from_seq,
                                "decision": record.decision,
                                "decided_by": record.decided_by,
                                "decided_why": record.decided_why,
                                "decided_at": record.decided_at,
                                "review": record.review,
                            },
                            ensure_ascii=False,
                        ),
                    ),
                )
            except BaseException:
                conn.execute("ROLLBACK")
                raise
            conn.execute("COMMIT")

        await self._run(job)

    async def reflections(self, agent_id: str | None = None, *, status: str | None = None) -> list[ReflectionRecord]:
        def job(conn: sqlite3.Connection) -> list[ReflectionRecord]:
            rows = conn.execute(
                f"SELECT {_RECORD_COLUMNS} FROM reflections WHERE (? IS NULL OR agent_id = ?) "
                "AND (? IS NULL OR status = ?) ORDER BY created_at, id",
                (agent_id, agent_id, status, status),
            ).fetchall()
            return [_record(r) for r in rows]

        result: list[ReflectionRecord] = await self._run(job)
        return result

    async def get_reflection(self, reflection_id: str) -> ReflectionRecord | None:
        def job(conn: sqlite3.Connection) -> ReflectionRecord | None:
            row = conn.execute(f"SELECT {_RECORD_COLUMNS} FROM reflections WHERE id = ?", (reflection_id,)).fetchone()
            return _record(row) if row else None

        result: ReflectionRecord | None = await self._run(job)
        return result

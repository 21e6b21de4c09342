"""A person's decisions on reflection branches (V1): show one, merge it, discard it.

The command line (``reverie reflections``) and the library (``orchestrator.api``) both call these,
so a decision is made one way: a merge goes through the normal merge-back (the repository lock,
validation, the resolver on a conflict when one is given), a discard deletes the branch, and both
record who decided and why in the reflection's store record and as a ``reflection.decided`` event
in the agent's event log. A change a merge brings into ``HEAD`` is a ``memory.commit`` whose source
is ``review`` (V2). Branches with no record (another repository, a crashed run) can be decided on
too; only the record is missing then.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from functools import partial
from pathlib import Path

from orchestrator.base import blocking
from orchestrator.base.errors import UsageError
from orchestrator.base.events import Event, MemoryCommitted, Publisher
from orchestrator.base.subagent_events import ReflectionDecided
from orchestrator.memfs.history import provenance_of
from orchestrator.memfs.lockowner import holding_as
from orchestrator.memfs.merge import discard_branch, merge_branch, resolve_branch
from orchestrator.memfs.repo import head_revision
from orchestrator.memfs.resolution import Resolver
from orchestrator.memfs.review import HeldBranch, branch_patch, held_branch
from orchestrator.store import ReflectionRecord, Store, utc_now
from subagents.reflection import render_transcript
from subagents.reflection_merge import Emit, settle

__all__ = ["Decision", "ReflectionReview", "discard_reflection", "find_record", "merge_reflection", "show_reflection"]


@dataclass(frozen=True)
class ReflectionReview:
    """What a person needs to decide on a branch: its record (None when the store has none), what
    it changes (``held``: None once it is in ``HEAD`` or gone), its diff, and the transcript span it
    drew on (empty without a record)."""

    branch: str
    record: ReflectionRecord | None
    held: HeldBranch | None
    patch: str
    transcript: str


@dataclass(frozen=True)
class Decision:
    """A decision made: ``decision`` is ``merge`` or ``discard``; ``outcome`` merge-back's
    (``merged``, ``resolved``, ``no_changes``, ``kept``, ``pending``, ``failed``) or ``discarded``;
    ``revision`` is ``HEAD`` after a merge; ``commits`` how many commits it merged or dropped."""

    reflection_id: str
    branch: str
    decision: str
    by: str
    why: str
    outcome: str
    revision: str | None
    commits: int
    reason: str | None = None
    record: ReflectionRecord | None = None


async def find_record(store: Store | None, agent_id: str, branch: str) -> ReflectionRecord | None:
    """The agent's record of ``branch`` (None when the store has none, or there is no store)."""
    if store is None:
        return None
    for record in await store.reflections(agent_id):
        if record.branch == branch:
            return record
    return None


async def show_reflection(store: Store | None, agent_id: str, memory_dir: Path, name_or_id: str) -> ReflectionReview:
    """The branch named by id or name, with its diff and transcript span; ``ReflectionBranchError``
    (one line) when no reverie branch has that name."""
    branch = await resolve_branch(memory_dir, name_or_id)
    record = await find_record(store, agent_id, branch)
    base = record.base_revision if record is not None else None
    held = await held_branch(memory_dir, branch, base)
    patch = await branch_patch(memory_dir, held) if held is not None else ""
    transcript = ""
    if store is not None and record is not None and record.conversation_id is not None:
        span = [
            m
            for m in await store.transcript(record.conversation_id, record.from_seq)
            if m.seq <= record.through_seq
        ]
        transcript = render_transcript(span) if span else ""
    return ReflectionReview(branch, record, held, patch, transcript)


def _check_why(why: str, decision: str) -> str:
    text = " ".join(why.split())
    if decision == "discard" and not text:
        raise UsageError("--why is empty: say why the reflection is discarded (it is recorded)")
    return text


async def merge_reflection(
    store: Store | None,
    agent_id: str,
    memory_dir: Path,
    name_or_id: str,
    *,
    by: str,
    why: str = "",
    resolver: Resolver | None = None,
) -> Decision:
    """Merge the branch through merge-back and record the decision. A conflict the resolver cannot
    reconcile (or no resolver) keeps the branch (``outcome`` ``kept``): nothing is lost."""
    why = _check_why(why, "merge")
    branch = await resolve_branch(memory_dir, name_or_id)
    record = await find_record(store, agent_id, branch)
    publish = _publisher(store, agent_id)
    conversation_id = record.conversation_id if record is not None else None
    before = await _head(memory_dir)
    with holding_as("reviewed reflection merge"):
        outcome = await merge_branch(memory_dir, branch, resolver=resolver)
    reflection_id = record.id if record is not None else branch.rsplit("/", 1)[-1]
    saved = record
    if store is not None and record is not None:
        saved = await settle(store, publish, record, outcome, first=False)
        saved = _decided(saved, "merge", by, why)
        await store.save_reflection(saved)
    if outcome.in_head and outcome.new_head and outcome.new_head != before:
        said = await blocking.run_sync("git", partial(provenance_of, memory_dir, outcome.new_head))
        provenance = said.as_dict() if said is not None else {}
        await publish(
            MemoryCommitted(outcome.new_head, before, "review", reflection_id, outcome.files, provenance=provenance),
            conversation_id,
        )
    await publish(
        ReflectionDecided(
            reflection_id, branch, "merge", by, why, outcome.status, outcome.new_head or "", outcome.commit_count
        ),
        conversation_id,
    )
    return Decision(
        reflection_id, branch, "merge", by, why, outcome.status, outcome.new_head, outcome.commit_count,
        outcome.reason, saved,
    )


async def discard_reflection(
    store: Store | None, agent_id: str, memory_dir: Path, name_or_id: str, *, by: str, why: str
) -> Decision:
    """Delete the branch and its unmerged commits (only on a person's word, with a reason)."""
    why = _check_why(why, "discard")
    branch = await resolve_branch(memory_dir, name_or_id)
    record = await find_record(store, agent_id, branch)
    dropped = await discard_branch(memory_dir, branch)
    reflection_id = record.id if record is not None else branch.rsplit("/", 1)[-1]
    publish = _publisher(store, agent_id)
    conversation_id = record.conversation_id if record is not None else None
    saved = record
    if store is not None and record is not None:
        saved = _decided(replace(record, status="discarded", reason=f"discarded by {by}: {why}"), "discard", by, why)
        await store.save_reflection(saved)
    await publish(ReflectionDecided(reflection_id, branch, "discard", by, why, "discarded", "", len(dropped)), conversation_id)
    return Decision(reflection_id, branch, "discard", by, why, "discarded", None, len(dropped), None, saved)


def _publisher(store: Store | None, agent_id: str) -> Emit:
    """The agent's event log; without a store (a repository that is not an agent's) nothing is logged."""
    if store is not None:
        return Publisher(store, agent_id)

    async def nowhere(event: Event, conversation_id: str | None) -> None:
        return None

    return nowhere


def _decided(record: ReflectionRecord, decision: str, by: str, why: str) -> ReflectionRecord:
    return replace(record, decision=decision, decided_by=by, decided_why=why or None, decided_at=utc_now())


async def _head(memory_dir: Path) -> str | None:
    return await blocking.run_sync("git", partial(head_revision, memory_dir))

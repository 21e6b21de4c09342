"""The per-conversation compiled system prompt (TURN-2.6, T1, R4).

Before every provider request the conversation's cached prompt is resolved against the memory
repository's current revision. Once a provider has seen a prompt it never changes except through
compaction or a new raw system prompt; committed memory changes reach the model as persisted
``<memory_update>`` messages instead, so the provider's prefix cache stays valid.

``decide`` is the pure table; ``resolve_system_prompt`` does the git and SQLite work around it.
Every compile is audited first (M8, ``orchestrator.agent.audit``): an invalid HEAD is never sent.
``preview_system_prompt`` answers the same question without writing anything: what the next
request's system prompt and memory messages would be (the REPL's context figure before a turn).
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from dataclasses import dataclass, replace
from enum import Enum
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING

from orchestrator.agent.reminders import memory_invalid_reminder, memory_update_reminder
from orchestrator.base import blocking
from orchestrator.memfs.git import GitRepo
from orchestrator.models.types import Message
from orchestrator.store import PromptRecord, Store, StoredMessage

if TYPE_CHECKING:
    from orchestrator.agent.audit import AuditedCompile
    from orchestrator.memfs.compiler import CompiledPrompt

__all__ = [
    "HeadRead",
    "PreviewedPrompt",
    "PromptAction",
    "ResolvedPrompt",
    "current_revision",
    "decide",
    "preview_system_prompt",
    "record_from",
    "resolve_system_prompt",
    "same_memory",
]


class PromptAction(Enum):
    FULL_COMPILE = "full"
    REUSE = "reuse"
    UNSENT_RECOMPILE = "unsent"
    MEMORY_CHANGED = "changed"


@dataclass(frozen=True)
class HeadRead:
    """HEAD as the caller just read it (``current_revision``), so resolving needs no read of its own."""

    commit: str | None


@dataclass(frozen=True)
class ResolvedPrompt:
    """The system prompt for the next request and which row of the cache table chose it."""

    content: str
    action: PromptAction
    revision: str | None
    update_message_id: str | None = None
    previous_revision: str | None = None


@dataclass(frozen=True)
class PreviewedPrompt:
    """What ``resolve_system_prompt`` would send now, nothing written: the system prompt, and the
    messages it would append first (a ``<memory_update>`` or the MEMORY INVALID reminder)."""

    content: str
    messages: tuple[Message, ...] = ()


def decide(row: PromptRecord | None, raw_system_hash: str, revision: str | None) -> PromptAction:
    """Rows 1-4 of the table in TURN-2.6, with rule 5 (a lost revision recompiles)."""
    if row is None or row.raw_system_hash != raw_system_hash:
        return PromptAction.FULL_COMPILE
    if row.memfs_revision == revision:
        return PromptAction.REUSE
    if revision is None:
        return PromptAction.FULL_COMPILE
    if row.first_sent_at is None:
        return PromptAction.UNSENT_RECOMPILE
    return PromptAction.MEMORY_CHANGED


def current_revision(memory_dir: Path) -> str | None:
    """HEAD of the memory repository through the pooled object reader (no extra process)."""
    with GitRepo(memory_dir).open() as reader:
        if reader is None:
            return None
        resolved = reader.revision("HEAD")
        return resolved.commit if resolved else None


def record_from(compiled: CompiledPrompt, *, conversation_id: str, agent_id: str) -> PromptRecord:
    return PromptRecord(
        conversation_id=conversation_id,
        agent_id=agent_id,
        content=compiled.content,
        core_memory=compiled.core_memory,
        compiled_at=compiled.compiled_at,
        raw_system_hash=compiled.raw_system_hash,
        memfs_revision=compiled.memfs_revision,
        memory_format=compiled.memory_format,
        first_sent_at=None,
        compiled_revision=compiled.memfs_revision,
    )


def _sha256(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


async def _compile(
    memory_dir: Path, raw_system: str, agent_id: str, conversation_id: str, revision: str | None, message_count: int
) -> AuditedCompile:
    # deferred: the compiler loads with the first compile; a chat whose prompt is cached for HEAD sends without it
    from orchestrator.agent.audit import compile_audited

    return await blocking.run_sync(
        "git",
        partial(
            compile_audited,
            memory_dir,
            raw_system,
            agent_id=agent_id,
            conversation_id=conversation_id,
            revision=revision,
            previous_message_count=message_count,
        )
    )


def same_memory(a: str, b: str) -> bool:
    """Whether two rendered core memories say the same thing (TURN-2.6 row 4's byte comparison).

    A v1 core memory ends with a ``<memory_metadata>`` block holding the compile time and the
    message count, so two compiles of one tree never compare equal; comparing them whole would turn
    every commit (a skill, a note outside memory) into a ``<memory_update>``. The block is therefore
    left out of the comparison; everything before it is compared byte for byte. v2 has no block.
    """
    return _without_metadata(a) == _without_metadata(b)


_METADATA_OPEN = "<memory_metadata>\n- AGENT_ID: "
_METADATA_CLOSE = "</memory_metadata>"


def _without_metadata(core_memory: str) -> str:
    if not core_memory.endswith(_METADATA_CLOSE):
        return core_memory
    start = core_memory.rfind(_METADATA_OPEN)
    if start < 0:
        return core_memory
    return core_memory[:start].removesuffix("\n\n")


async def resolve_system_prompt(
    store: Store,
    *,
    conversation_id: str,
    agent_id: str,
    memory_dir: Path,
    raw_system: str,
    turn_id: str | None = None,
    head: HeadRead | None = None,
) -> ResolvedPrompt:
    """The prompt to send now; may persist a fresh compile or append a ``<memory_update>``.

    ``HEAD`` is read once and every compile is pinned to that revision. A message and the row it
    implies are written in one transaction (rule 4), so a crash between them cannot lose an update.
    The v1 ``<memory_metadata>`` message count is the conversation's in-context message count, as
    compaction passes it. ``head``: HEAD read by the caller a moment ago (the turn reads it with the
    skills in one worker hop); read here otherwise.
    """
    revision, row, action = await _decide(store, conversation_id, memory_dir, raw_system, head)
    if action is PromptAction.REUSE:
        assert row is not None
        return ResolvedPrompt(row.content, action, revision, previous_revision=row.memfs_revision)
    history = await store.in_context(conversation_id)
    audited = await _compile(memory_dir, raw_system, agent_id, conversation_id, revision, len(history))
    if audited.errors and not audited.repaired:
        return await _refuse_invalid(store, conversation_id, agent_id, row, action, audited, turn_id)
    resolved = await _use_compiled(store, conversation_id, agent_id, row, action, revision, audited.compiled, history, turn_id)
    if audited.repaired:
        await _remind_invalid(store, conversation_id, audited, turn_id)
    return resolved


async def _decide(
    store: Store, conversation_id: str, memory_dir: Path, raw_system: str, head: HeadRead | None
) -> tuple[str | None, PromptRecord | None, PromptAction]:
    """HEAD (the caller's read, else one now), the conversation's prompt row and the table's row for
    them: where resolving and previewing the next request's prompt both start."""
    if head is not None:
        revision = head.commit
    else:
        revision = await blocking.run_sync("git", partial(current_revision, memory_dir))
    row = await store.get_prompt(conversation_id)
    return revision, row, decide(row, _sha256(raw_system), revision)


async def _use_compiled(
    store: Store,
    conversation_id: str,
    agent_id: str,
    row: PromptRecord | None,
    action: PromptAction,
    revision: str | None,
    compiled: CompiledPrompt,
    history: Sequence[StoredMessage],
    turn_id: str | None,
) -> ResolvedPrompt:
    """Rows R1-R4 for a compile that may reach the model: the prompt row set, with a
    ``<memory_update>`` when the memory a sent prompt shows has changed."""
    previous = row.memfs_revision if row is not None else None
    if action is PromptAction.MEMORY_CHANGED:
        assert row is not None and revision is not None
        moved = replace(row, memfs_revision=revision, compiled_at=compiled.compiled_at)
        if same_memory(compiled.core_memory, row.core_memory):
            await store.set_prompt(moved)
            return ResolvedPrompt(row.content, action, revision, previous_revision=previous)
        stored = await store.append_message(
            conversation_id,
            _update_message(revision, compiled.core_memory),
            turn_id=turn_id,
            metadata={"memfs_revision": revision, "previous_memfs_revision": row.memfs_revision},
            prompt=replace(moved, core_memory=compiled.core_memory),
        )
        return ResolvedPrompt(row.content, action, revision, stored.id, previous)
    record = record_from(compiled, conversation_id=conversation_id, agent_id=agent_id)
    stale = _stale_update(history, compiled.memfs_revision)
    if stale is None:
        await store.set_prompt(record)
        return ResolvedPrompt(record.content, action, compiled.memfs_revision, previous_revision=previous)
    assert compiled.memfs_revision is not None
    stored = await store.append_message(
        conversation_id,
        _update_message(compiled.memfs_revision, compiled.core_memory),
        turn_id=turn_id,
        metadata={
            "memfs_revision": compiled.memfs_revision,
            "previous_memfs_revision": stale.metadata.get("memfs_revision"),
        },
        prompt=record,
    )
    return ResolvedPrompt(record.content, action, compiled.memfs_revision, stored.id, previous)


async def preview_system_prompt(
    store: Store,
    *,
    conversation_id: str,
    agent_id: str,
    memory_dir: Path,
    raw_system: str,
    head: HeadRead | None = None,
) -> PreviewedPrompt:
    """``resolve_system_prompt``'s answer for the next request, read-only: the same table, the same
    audited compile, and the message each row would append, without persisting any of it."""
    revision, row, action = await _decide(store, conversation_id, memory_dir, raw_system, head)
    if action is PromptAction.REUSE:
        assert row is not None
        return PreviewedPrompt(row.content)
    history = await store.in_context(conversation_id)
    audited = await _compile(memory_dir, raw_system, agent_id, conversation_id, revision, len(history))
    compiled = audited.compiled
    content = row.content if action is PromptAction.MEMORY_CHANGED and row is not None else compiled.content
    if audited.errors:
        assert audited.invalid_revision is not None
        invalid = memory_invalid_reminder(audited.invalid_revision[:7], audited.errors)
        return PreviewedPrompt(content, (Message(role="user", content=invalid, kind="reminder"),))
    if action is PromptAction.MEMORY_CHANGED:
        assert row is not None and revision is not None
        changed = not same_memory(compiled.core_memory, row.core_memory)
        return PreviewedPrompt(content, (_update_message(revision, compiled.core_memory),) if changed else ())
    stale = _stale_update(history, compiled.memfs_revision)
    if stale is None or compiled.memfs_revision is None:
        return PreviewedPrompt(content)
    return PreviewedPrompt(content, (_update_message(compiled.memfs_revision, compiled.core_memory),))


async def _refuse_invalid(
    store: Store,
    conversation_id: str,
    agent_id: str,
    row: PromptRecord | None,
    action: PromptAction,
    audited: AuditedCompile,
    turn_id: str | None,
) -> ResolvedPrompt:
    """M8: HEAD fails the audit, so its tree is not sent. The model gets S12's MEMORY INVALID
    reminder instead, persisted with a row that records HEAD as seen (so it is said once per
    revision) while the prompt keeps the last memory that passed. A later valid commit then
    arrives as a normal ``<memory_update>`` against that memory."""
    invalid = audited.invalid_revision
    assert invalid is not None
    if action is PromptAction.MEMORY_CHANGED and row is not None:
        record = replace(row, memfs_revision=invalid)
    else:
        compiled = record_from(audited.compiled, conversation_id=conversation_id, agent_id=agent_id)
        record = replace(compiled, memfs_revision=invalid)
    reminder = Message(role="user", content=memory_invalid_reminder(invalid[:7], audited.errors), kind="reminder")
    await store.append_message(
        conversation_id,
        reminder,
        turn_id=turn_id,
        metadata={"memfs_revision": invalid, "memory_invalid": True},
        prompt=record,
    )
    previous = row.memfs_revision if row is not None else None
    return ResolvedPrompt(record.content, action, invalid, previous_revision=previous)


async def _remind_invalid(store: Store, conversation_id: str, audited: AuditedCompile, turn_id: str | None) -> None:
    """S12's MEMORY INVALID reminder after a repaired compile: the model hears what was kept out,
    by file name, once per revision (the row now records the revision as seen)."""
    invalid = audited.invalid_revision
    assert invalid is not None
    reminder = Message(role="user", content=memory_invalid_reminder(invalid[:7], audited.errors), kind="reminder")
    metadata = {"memfs_revision": invalid, "memory_invalid": True}
    await store.append_message(conversation_id, reminder, turn_id=turn_id, metadata=metadata)


def _update_message(revision: str, core_memory: str) -> Message:
    return Message(role="user", content=memory_update_reminder(revision, core_memory), kind="memory_update")


def _stale_update(history: Sequence[StoredMessage], revision: str | None) -> StoredMessage | None:
    """Rule 3 of TURN-2.6: after a full compile (rows 1 and 3), an older ``<memory_update>`` in context must not
    have the last word over the fresh prompt. Returns the newest update in context when its revision
    differs from the compiled one (a fresh update for ``revision`` must then follow it)."""
    if revision is None:
        return None
    updates = [m for m in history if m.message.kind == "memory_update"]
    if not updates or updates[-1].metadata.get("memfs_revision") == revision:
        return None
    return updates[-1]

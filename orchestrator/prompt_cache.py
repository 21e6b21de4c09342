"""The per-conversation compiled system prompt (turn-loop.md 2.6, DECISIONS T1, R4).

Before every provider request the conversation's cached prompt is resolved against the memory
repository's current revision. Once a provider has seen a prompt it never changes except through
compaction or a new raw system prompt; committed memory changes reach the model as persisted
``<memory_update>`` messages instead, so the provider's prefix cache stays valid.

``decide`` is the pure table; ``resolve_system_prompt`` does the git and SQLite work around it.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, replace
from enum import Enum
from functools import partial
from pathlib import Path

import anyio

from orchestrator.memfs.compiler import CompiledPrompt, compile_system_prompt
from orchestrator.memfs.reader import open_reader
from orchestrator.models.types import Message
from orchestrator.reminders import memory_update_reminder
from orchestrator.store import PromptRecord, Store

__all__ = ["PromptAction", "ResolvedPrompt", "current_revision", "decide", "record_from", "resolve_system_prompt"]


class PromptAction(Enum):
    FULL_COMPILE = "full"
    REUSE = "reuse"
    UNSENT_RECOMPILE = "unsent"
    MEMORY_CHANGED = "changed"


@dataclass(frozen=True)
class ResolvedPrompt:
    content: str
    action: PromptAction
    revision: str | None
    update_message_id: str | None = None


def decide(row: PromptRecord | None, raw_system_hash: str, revision: str | None) -> PromptAction:
    """Rows R1-R4 of the table in turn-loop.md 2.6, with rule 5 (a lost revision recompiles)."""
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
    with open_reader(memory_dir) as reader:
        if reader is None:
            return None
        resolved = reader.resolve("HEAD")
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


async def _compile(memory_dir: Path, raw_system: str, agent_id: str, conversation_id: str, revision: str | None) -> CompiledPrompt:
    return await anyio.to_thread.run_sync(
        partial(
            compile_system_prompt,
            memory_dir,
            raw_system,
            agent_id=agent_id,
            conversation_id=conversation_id,
            revision=revision,
        )
    )


async def resolve_system_prompt(
    store: Store,
    *,
    conversation_id: str,
    agent_id: str,
    memory_dir: Path,
    raw_system: str,
    turn_id: str | None = None,
) -> ResolvedPrompt:
    """The prompt to send now; may persist a fresh compile or append a ``<memory_update>``."""
    revision = await anyio.to_thread.run_sync(current_revision, memory_dir)
    row = await store.get_prompt(conversation_id)
    action = decide(row, _sha256(raw_system), revision)
    if action is PromptAction.REUSE:
        assert row is not None
        return ResolvedPrompt(row.content, action, revision)
    compiled = await _compile(memory_dir, raw_system, agent_id, conversation_id, revision)
    if action is PromptAction.MEMORY_CHANGED:
        assert row is not None and revision is not None
        moved = replace(row, memfs_revision=revision, compiled_at=compiled.compiled_at)
        if compiled.core_memory == row.core_memory:
            await store.set_prompt(moved)
            return ResolvedPrompt(row.content, action, revision)
        stored = await store.append_message(
            conversation_id,
            Message(role="user", content=memory_update_reminder(revision, compiled.core_memory), kind="memory_update"),
            turn_id=turn_id,
            metadata={"memfs_revision": revision, "previous_memfs_revision": row.memfs_revision},
            prompt=replace(moved, core_memory=compiled.core_memory),
        )
        return ResolvedPrompt(row.content, action, revision, stored.id)
    record = record_from(compiled, conversation_id=conversation_id, agent_id=agent_id)
    await store.set_prompt(record)
    update_id = await _refresh_stale_updates(store, conversation_id, compiled, turn_id)
    return ResolvedPrompt(record.content, action, compiled.memfs_revision, update_id)


async def _refresh_stale_updates(
    store: Store, conversation_id: str, compiled: CompiledPrompt, turn_id: str | None
) -> str | None:
    """Rule 3 of 2.6: after a full compile, an older ``<memory_update>`` in context must not have the
    last word, so a fresh one for the compiled revision follows it."""
    if compiled.memfs_revision is None:
        return None
    history = await store.in_context(conversation_id)
    updates = [m for m in history if m.message.kind == "memory_update"]
    if not updates or updates[-1].metadata.get("memfs_revision") == compiled.memfs_revision:
        return None
    stored = await store.append_message(
        conversation_id,
        Message(
            role="user",
            content=memory_update_reminder(compiled.memfs_revision, compiled.core_memory),
            kind="memory_update",
        ),
        turn_id=turn_id,
        metadata={
            "memfs_revision": compiled.memfs_revision,
            "previous_memfs_revision": updates[-1].metadata.get("memfs_revision"),
        },
    )
    return stored.id

"""Audit before the model (M8, S12, S13): a committed tree is audited before any compile the
model will read, so a commit made with ``--no-verify`` never reaches a request.

``compile_audited`` is the compile every model-facing caller uses (the prompt cache, compaction's
recompile and core memory, reflection): it audits the revision (tree constraints and frontmatter,
S13); a valid one compiles as usual; an invalid one is replaced by the newest first-parent ancestor
that passes (or by no memory at all when none does within ``_ANCESTORS`` commits) and the result
carries the error lines, which name files, never their content, for S12's MEMORY INVALID reminder.

Each commit is audited once per process (a commit never changes). Blocking (git); call from a worker
thread.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from orchestrator.memfs.compiler import CompiledPrompt, compile_system_prompt, inject_core_memory
from orchestrator.memfs.git import open_repo
from orchestrator.memfs.history import first_parents

__all__ = ["AuditedCompile", "audit_errors", "compile_audited"]

_ANCESTORS = 50
_CACHE_SIZE = 256
_AUDITED: dict[tuple[str, str], tuple[str, ...]] = {}


@dataclass(frozen=True)
class AuditedCompile:
    """``compiled`` is safe to send; ``errors`` (empty when valid) are the audit's lines for
    ``invalid_revision``, the revision that was asked for and not compiled."""

    compiled: CompiledPrompt
    errors: tuple[str, ...] = ()
    invalid_revision: str | None = None


def audit_errors(memory_dir: Path, revision: str, *, common_dir: Path | None = None) -> tuple[str, ...]:
    """The M8 audit's error lines for ``revision`` (empty when it passes), cached per commit.
    ``common_dir``: the repository's common git directory (resolved), when the caller knows it
    (the post-turn check: it located the repository already)."""
    # deferred: the validator loads with the first audit, after a chat's first request (P1)
    from orchestrator.memfs.validator import audit_head

    key = (str(common_dir) if common_dir is not None else _repository(memory_dir), revision)
    if key not in _AUDITED:
        if len(_AUDITED) >= _CACHE_SIZE:
            _AUDITED.pop(next(iter(_AUDITED)))
        _AUDITED[key] = tuple(audit_head(memory_dir, revision=revision).errors)
    return _AUDITED[key]


def _repository(memory_dir: Path) -> str:
    """What an audit is cached under with the commit: the common git directory, so a linked worktree
    at a commit already audited (compaction's, C9, on most turns of a long session) is not audited
    again; the layout policy the audit reads lives there too."""
    with open_repo(memory_dir) as reader:
        return str(reader.common_dir) if reader is not None else str(memory_dir)


def _head(memory_dir: Path) -> str | None:
    with open_repo(memory_dir) as reader:
        if reader is None:
            return None
        resolved = reader.revision("HEAD")
        return resolved.commit if resolved else None


def _last_valid_ancestor(memory_dir: Path, revision: str) -> str | None:
    for commit in first_parents(memory_dir, revision, _ANCESTORS)[1:]:
        if not audit_errors(memory_dir, commit):
            return commit
    return None


def compile_audited(
    memory_dir: str | os.PathLike[str],
    raw_system: str,
    *,
    agent_id: str,
    conversation_id: str | None = None,
    previous_message_count: int = 0,
    revision: str | None = None,
) -> AuditedCompile:
    """``compile_system_prompt`` of ``revision`` (default HEAD) once it passes the audit; see the
    module docstring for an invalid one."""
    repo = Path(memory_dir)
    target = revision or _head(repo)

    def compile_at(rev: str | None) -> CompiledPrompt:
        return compile_system_prompt(
            repo,
            raw_system,
            agent_id=agent_id,
            conversation_id=conversation_id,
            previous_message_count=previous_message_count,
            revision=rev,
        )

    if target is None:
        return AuditedCompile(compile_at(revision))
    errors = audit_errors(repo, target)
    if not errors:
        return AuditedCompile(compile_at(target))
    fallback = _last_valid_ancestor(repo, target)
    if fallback is not None:
        return AuditedCompile(compile_at(fallback), errors, target)
    empty = compile_at(target)
    blank = CompiledPrompt(
        content=inject_core_memory(raw_system, ""),
        core_memory="",
        compiled_at=empty.compiled_at,
        raw_system_hash=empty.raw_system_hash,
        memfs_revision=None,
        memory_format=empty.memory_format,
    )
    return AuditedCompile(blank, errors, target)

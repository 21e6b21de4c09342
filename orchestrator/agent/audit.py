"""Audit before the model (M8, S12, S13): a committed tree is audited before any compile the
model will read, so a commit made with ``--no-verify`` never reaches a request.

``compile_audited`` is the compile every model-facing caller uses (the prompt cache, compaction's
recompile and core memory, reflection): it audits the revision (tree constraints and frontmatter,
S13); a valid one compiles as usual; an invalid one is replaced by the last accepted revision (or
the newest first-parent ancestor that passes, or no memory at all when none does within
``_ANCESTORS`` commits) and the result carries the error lines, which name files, never their
content, for S12's MEMORY INVALID reminder.

The audit judges a revision against the last revision it accepted in the repository
(``memfs.protection``), walking the first parents in between, so a protected file edited with
``--no-verify`` is still an edit after any number of ordinary commits on top. When what is wrong is
only such an edit (or a config change without the user's approval), the revision is compiled with
those files as last accepted (``repaired``): the rest of it reaches the model, the edit does not,
and the user is warned. Only the main checkout moves the record; worktrees read it.

Each (commit, base) is audited once per process (a commit never changes). Blocking (git); call
from a worker thread.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, replace
from pathlib import Path

from orchestrator.memfs import protection
from orchestrator.memfs.compiler import CompiledPrompt, compile_system_prompt, inject_core_memory
from orchestrator.memfs.git import GitRepo
from orchestrator.memfs.gitdir import is_main_checkout
from orchestrator.memfs.gittrees import TreeTooLarge
from orchestrator.memfs.guard import report
from orchestrator.memfs.history import first_parents

__all__ = ["AuditedCompile", "Verdict", "audit_errors", "compile_audited", "judge"]

_ANCESTORS = 50
_CACHE_SIZE = 256
_AUDITED: dict[tuple[str, str], tuple[str, ...]] = {}
_JUDGED: dict[tuple[str, str, str], tuple[str, ...]] = {}
_WARNED: set[tuple[str, str]] = set()


@dataclass(frozen=True)
class AuditedCompile:
    """``compiled`` is safe to send; ``errors`` (empty when valid) are the audit's lines for
    ``invalid_revision``, the revision that was asked for and not compiled."""

    compiled: CompiledPrompt
    errors: tuple[str, ...] = ()
    invalid_revision: str | None = None
    repaired: bool = False
    """``compiled`` is ``invalid_revision`` itself with its protected files as last accepted: it
    may reach the model as that revision's memory (a ``<memory_update>``), beside the reminder."""


@dataclass(frozen=True)
class Verdict:
    """The audit of ``revision`` against the last accepted revision ``accepted`` (None when none
    was recorded: then against its first parent, as before the first accepted one); ``errors``
    empty means ``revision`` is accepted."""

    revision: str
    errors: tuple[str, ...]
    accepted: str | None


def audit_errors(memory_dir: Path, revision: str, *, common_dir: Path | None = None) -> tuple[str, ...]:
    """The M8 audit's error lines for ``revision`` (empty when it passes) against the last accepted
    revision (``judge``). ``common_dir``: the repository's common git directory (resolved), when the
    caller knows it (the post-turn check: it located the repository already)."""
    return judge(memory_dir, revision, common_dir=common_dir).errors


def _parent_audit(memory_dir: Path, revision: str, *, common_dir: Path | None = None) -> tuple[str, ...]:
    """The audit of ``revision`` against its first parent, cached per commit."""
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
    with GitRepo(memory_dir).open() as reader:
        return str(reader.common_dir) if reader is not None else str(memory_dir)


def _head(memory_dir: Path) -> str | None:
    with GitRepo(memory_dir).open() as reader:
        if reader is None:
            return None
        resolved = reader.revision("HEAD")
        return resolved.commit if resolved else None


def _last_valid_ancestor(memory_dir: Path, revision: str) -> str | None:
    for commit in first_parents(memory_dir, revision, _ANCESTORS)[1:]:
        if not _parent_audit(memory_dir, commit):
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
    verdict = judge(repo, target)
    errors = verdict.errors
    if not errors:
        return AuditedCompile(compile_at(target))
    if verdict.accepted is not None:
        repaired = _repaired(repo, verdict.accepted, target)
        if repaired is not None:
            return AuditedCompile(replace(compile_at(repaired), memfs_revision=target), errors, target, repaired=True)
    fallback = verdict.accepted if verdict.accepted is not None else _last_valid_ancestor(repo, target)
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


# ---------------------------------------------------------------------------------------------
# The last accepted revision (memfs/protection.py)
# ---------------------------------------------------------------------------------------------


def judge(memory_dir: str | os.PathLike[str], revision: str, *, common_dir: Path | None = None) -> Verdict:
    """``revision`` audited against the last accepted revision, the record moved forward over the
    commits in between that pass (main checkout only); see the module docstring."""
    repo = Path(memory_dir)
    common = common_dir if common_dir is not None else Path(_repository(repo))
    recorded = protection.read_accepted(common)
    if recorded == revision:
        return Verdict(revision, (), recorded)
    if recorded is None or not _is_commit(repo, recorded):
        errors = _parent_audit(repo, revision, common_dir=common)
        if not errors:
            _advance(repo, common, revision)
        return Verdict(revision, errors, None)
    accepted = _walk(repo, common, recorded, revision)
    if accepted != recorded:
        _advance(repo, common, accepted)
    if accepted == revision:
        return Verdict(revision, (), accepted)
    return Verdict(revision, _against(repo, common, revision, accepted), accepted)


def _walk(repo: Path, common: Path, recorded: str, revision: str) -> str:
    """The newest commit from ``recorded`` to ``revision`` (first parents, oldest first) that passes
    against the one accepted before it; ``revision`` is judged alone when ``recorded`` is not among
    its last ``_ANCESTORS`` first parents (history rewritten, or a worktree's branch)."""
    chain = first_parents(repo, revision, _ANCESTORS)
    steps = list(reversed(chain[: chain.index(recorded)])) if recorded in chain else [revision]
    accepted = recorded
    for commit in steps:
        if not _against(repo, common, commit, accepted):
            accepted = commit
    return accepted


def _against(repo: Path, common: Path, revision: str, accepted: str) -> tuple[str, ...]:
    """The audit of ``revision`` against ``accepted``, cached per (repository, commit, base)."""
    # deferred: the validator loads with the first audit, after a chat's first request (P1)
    from orchestrator.memfs.validator import audit_head

    key = (str(common), revision, accepted)
    if key not in _JUDGED:
        with GitRepo(repo).open() as local:
            approved = local is not None and protection.config_change_approved(local, common, accepted, revision)
        if len(_JUDGED) >= _CACHE_SIZE:
            _JUDGED.pop(next(iter(_JUDGED)))
        result = audit_head(repo, revision=revision, base=accepted, config_approved=approved)
        _JUDGED[key] = tuple(result.errors)
    return _JUDGED[key]


def _advance(repo: Path, common: Path, commit: str) -> None:
    """Record ``commit`` as accepted when ``repo`` is the main checkout (a worktree's branch is
    judged when it is merged back, from the main checkout's record)."""
    if is_main_checkout(repo) and protection.read_accepted(common) != commit:
        protection.record_accepted(common, commit)


def _is_commit(repo: Path, revision: str) -> bool:
    with GitRepo(repo).open() as local:
        return local is not None and local.resolve(revision) is not None


def _repaired(repo: Path, accepted: str, target: str) -> str | None:
    """The commit to compile for ``target`` when what fails is only a protected file or an
    unapproved config change: ``target`` with those put back as ``accepted`` has them, once that
    passes; the user is warned once per revision. None when something else fails too."""
    try:
        repair = protection.repaired_commit(repo, accepted, target)
    except TreeTooLarge:
        return None  # a tree over a cap is not read, so not repaired either: the accepted one is compiled
    if repair is None:
        return None
    common = Path(_repository(repo))
    if _against(repo, common, repair.commit, accepted):
        return None
    if (str(common), target) not in _WARNED:
        _WARNED.add((str(common), target))
        report(
            repo,
            f"{repo}: the memory committed at {target[:7]} changes protected files ({', '.join(repair.paths)}) "
            f"without approval; the prompt keeps them as accepted at {accepted[:7]}",
            restored=False,
        )
    return repair.commit

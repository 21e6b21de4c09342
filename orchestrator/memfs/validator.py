"""Pre-commit validation of a MemFS repository: one verdict and one report (MEMFS-4.4 to MEMFS-4.11).

``validate_snapshot`` is the pure core: the hook (``hook.py``) and reverie's own commits
(``validate_staged``, S21) both go through it, so their verdicts and reports are
identical. ``audit_snapshot`` checks a committed tree the same way (M8, S13). The I/O entry points
read git with blocking subprocesses; async callers run them in a worker thread.

Reports are the reference's text byte for byte except the product name (M7): the frontmatter stage
prints ``Memory validation failed:`` (legacy: ``Frontmatter validation failed:``), the tree
constraints print the "blocked this commit" report, audits print ``Memory constraints failed:``.
D10 (reverie's own rule, checked first and reported alone): a name this commit adds must not contain
``<``, ``>``, a control character or non-UTF-8 bytes, nor render as one of reverie's structural
tags (``rules.name_error``); with it, a Markdown file this commit adds or changes must not hold such a
tag in its ``description`` or ``name`` (``rules.markup_errors``, A7). Files the commit
does not touch are not judged, so a repository that already has one keeps committing; the compiler
neutralises what is there.
Chosen where the reference is silent: a symlinked Markdown file is checked by its blob (the link
target) in the frontmatter stage, as the reference's ``git show`` does; audits of legacy trees skip
the ``read_only`` protection rules, which judge a change rather than a tree.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from dataclasses import dataclass, replace
from pathlib import Path
from types import MappingProxyType
from typing import Final, Literal

from orchestrator.memfs import gitsnapshot
from orchestrator.memfs.constraints import (
    CONFIG_PATH,
    DEFAULT_CONFIG,
    ConfigError,
    change_approved,
    parse_config,
    read_only_errors,
    read_only_patterns,
    tree_constraint_errors,
)
from orchestrator.memfs.gittrees import TreeTooLarge
from orchestrator.memfs.policy import NEEDS_APPROVAL, ROOT_MARKER, SHARED_MEMORY, LayoutPolicy
from orchestrator.memfs.rules import (
    legacy_frontmatter_errors,
    markup_errors,
    name_error,
    v2_frontmatter_errors,
)
from orchestrator.memfs.snapshot import Entry, Snapshot

__all__ = [
    "ReportKind",
    "ValidationResult",
    "audit_head",
    "audit_snapshot",
    "format_report",
    "validate_head",
    "validate_snapshot",
    "validate_staged",
]

ReportKind = Literal["none", "frontmatter", "legacy-frontmatter", "constraints", "fatal", "unreadable", "audit"]

_V2_FLAT_SKILL = re.compile(r"skills/[^/]+\.md", re.DOTALL)
_LEGACY_FLAT_SKILL = re.compile(r"(?:memory/)?skills/[^/]+\.md", re.DOTALL)
_LEGACY_MEMORY = re.compile(r"(?:memory/)?(?:system|reference)/.*\.md", re.DOTALL)
_FLAT_SKILL_MESSAGE: Final = "{}: invalid skill path (skills must be folders). Use skills/<name>/SKILL.md"
_BLOCKED_HEAD: Final = (
    "Memory validation blocked this commit.\n"
    "No files were committed. Your staged changes are still present.\n"
    "Validation checks the complete repository, so these problems may predate your staged changes.\n"
    "\n"
    "Fix these problems:\n"
)
_BLOCKED_ROOT_MARKER: Final = "Move non-core detail out of root Markdown and behind MEMORY.md indexes.\n"
_BLOCKED_TAIL: Final = (
    "Split files above their per-file limit, then retry the commit.\n"
    "Limits come from .memfs.config.json, or the reverie defaults when it is absent.\n"
    "Do not raise or disable these limits unless the user explicitly approves it.\n"
)
_UNREADABLE: Final = "Memory validation could not read Git contents. No files were committed."
_UNAPPROVED: Final = (
    f"{CONFIG_PATH}: changed since the last accepted revision without the user's approval, so its protection "
    "stays in force (the user approves a change by committing it from their own shell with "
    "REVERIE_MEMORY_CONSTRAINTS_UPDATE=1)"
)


@dataclass(frozen=True)
class ValidationResult:
    """A verdict: the error lines (without indentation), which report prints them, the policy used."""

    errors: tuple[str, ...]
    kind: ReportKind = "none"
    policy: LayoutPolicy = ROOT_MARKER

    @property
    def ok(self) -> bool:
        return not self.errors


def format_report(result: ValidationResult) -> str:
    """What the hook prints (on stderr) for ``result``; ``""`` when it passed."""
    if result.ok:
        return ""
    lines = "".join(f"  {error}\n" for error in result.errors)
    if result.kind == "frontmatter":
        return "Memory validation failed:\n\n" + lines
    if result.kind == "legacy-frontmatter":
        return "Frontmatter validation failed:\n\n" + lines
    if result.kind == "unreadable":
        return _UNREADABLE + "\n"
    if result.kind in ("fatal", "audit"):
        return "Memory constraints failed:\n" + lines
    tail = (_BLOCKED_ROOT_MARKER if result.policy == ROOT_MARKER else "") + _BLOCKED_TAIL
    return _BLOCKED_HEAD + lines + "\n" + tail


class _Unreadable(Exception):
    pass


def _text(snapshot: Snapshot, path: str) -> str:
    data = snapshot.staged_bytes(path)
    if data is None:
        raise _Unreadable(path)
    return data.decode("utf-8", "replace")


def _flat_skill_errors(snapshot: Snapshot, pattern: re.Pattern[str]) -> list[str]:
    return [
        _FLAT_SKILL_MESSAGE.format(path)
        for path, status in snapshot.changes.items()
        if status[:1] in ("A", "C", "M", "R") and pattern.fullmatch(path)
    ]


def _name_errors(snapshot: Snapshot) -> list[str]:
    """D10 for the names this commit adds (``A``, ``C``, ``R``) and item 7 for the fields of the Markdown
    files it adds or changes: existing names stay as they are, so a
    repository that already has such a file keeps compiling as the reference renders it."""
    errors = []
    for path, status in snapshot.changes.items():
        if status[:1] in ("A", "C", "R"):
            error = name_error(path)
            if error is not None:
                errors.append(error)
        if status[:1] in ("A", "C", "M", "R") and path.endswith(".md"):
            data = snapshot.staged_bytes(path)
            if data is not None:
                errors.extend(markup_errors(path, data.decode("utf-8", "replace")))
    return errors


def _v2_frontmatter(snapshot: Snapshot, policy: LayoutPolicy) -> list[str]:
    errors = _flat_skill_errors(snapshot, _V2_FLAT_SKILL)
    for path in snapshot.index:
        if not path.endswith(".md") or path.startswith("skills/"):
            continue
        if policy == ROOT_MARKER and not _indexed(path, snapshot.index):
            continue
        errors.extend(v2_frontmatter_errors(path, _text(snapshot, path)))
    return errors


def _indexed(path: str, index: Mapping[str, Entry]) -> bool:
    directory = path.rpartition("/")[0]
    while directory:
        if f"{directory}/MEMORY.md" not in index:
            return False
        directory = directory.rpartition("/")[0]
    return True


def _legacy_frontmatter(snapshot: Snapshot, *, audit: bool) -> list[str]:
    errors = _flat_skill_errors(snapshot, _LEGACY_FLAT_SKILL)
    if audit:
        candidates = [p for p in snapshot.index if _LEGACY_MEMORY.fullmatch(p)]
    else:
        candidates = [
            p for p, s in snapshot.changes.items() if s[:1] in ("A", "C", "M") and _LEGACY_MEMORY.fullmatch(p)
        ]
    for path in candidates:
        if audit:
            previous = None
        else:
            head = snapshot.head_bytes(path)
            previous = None if head is None else head.decode("utf-8", "replace")
        errors.extend(legacy_frontmatter_errors(path, _text(snapshot, path), previous, protect=not audit))
    return errors


def _constraints(
    snapshot: Snapshot,
    policy: LayoutPolicy,
    env: Mapping[str, str],
    *,
    audit: bool,
    require_root_marker: bool,
    config_approved: bool | None = None,
) -> list[str]:
    """The validator script's flow (MEMFS-4.6), from the protection check to the tree check.

    An audit keeps the accepted tree's ``readOnlyFiles`` in force beside the new ones, so a change
    that drops a pattern is judged by it (``memfs.protection``); ``config_approved`` False reports a
    config change as unapproved, None leaves approval unjudged (an audit against the first parent)."""
    index, head = snapshot.index, snapshot.head or {}
    errors: list[str] = []
    if not audit and index.get(CONFIG_PATH) != head.get(CONFIG_PATH) and not change_approved(env):
        errors.append(NEEDS_APPROVAL)
    kept = read_only_patterns(snapshot.head_bytes(CONFIG_PATH)) if audit else ()
    if audit and config_approved is False and index.get(CONFIG_PATH) != head.get(CONFIG_PATH):
        errors.append(_UNAPPROVED)
    has_config = CONFIG_PATH in index
    has_v2_root = policy == ROOT_MARKER and ("MEMORY.md" in index or require_root_marker)
    if not has_config and not has_v2_root:
        return [*errors, *read_only_errors(index, head, kept)]
    config = DEFAULT_CONFIG
    if has_config:
        if not index[CONFIG_PATH].is_regular:
            return [*errors, f"{CONFIG_PATH}: constraint config must be a regular file", *read_only_errors(index, head, kept)]
        parsed = parse_config(_text(snapshot, CONFIG_PATH))
        if isinstance(parsed, ConfigError):
            return [*errors, *parsed.errors, *read_only_errors(index, head, kept)]
        if errors and not audit:
            return errors
        config, present = parsed
        if policy == ROOT_MARKER:
            config = config.overlay_on(DEFAULT_CONFIG, present)
    if kept:
        config = replace(config, read_only_files=(*config.read_only_files, *kept))

    def read(path: str) -> bytes:
        data = snapshot.staged_bytes(path)
        if data is None:
            raise _Unreadable(path)
        return data

    errors.extend(
        tree_constraint_errors(
            index, read, config, policy, require_root_marker=require_root_marker, accepted=head
        )
    )
    return errors


def _run_constraints(snapshot: Snapshot, policy: LayoutPolicy, marker: bool) -> bool:
    """The hook's condition for running the validator at all."""
    head = snapshot.head or {}
    return (policy == ROOT_MARKER and marker) or CONFIG_PATH in snapshot.index or CONFIG_PATH in head


def validate_snapshot(
    snapshot: Snapshot, policy: LayoutPolicy, env: Mapping[str, str] = MappingProxyType({})
) -> ValidationResult:
    """The hook's verdict on a staged index (MEMFS-4.4): frontmatter stage, then tree constraints."""
    head = snapshot.head or {}
    marker = "MEMORY.md" in snapshot.index or "MEMORY.md" in head
    use_v2 = policy == SHARED_MEMORY or (policy == ROOT_MARKER and marker)
    refused = _name_errors(snapshot)
    if refused:
        return ValidationResult(tuple(refused), "frontmatter" if use_v2 else "legacy-frontmatter", policy)
    try:
        errors = _v2_frontmatter(snapshot, policy) if use_v2 else _legacy_frontmatter(snapshot, audit=False)
    except _Unreadable:
        return ValidationResult(("could not read Git contents",), "unreadable", policy)
    if errors:
        return ValidationResult(tuple(errors), "frontmatter" if use_v2 else "legacy-frontmatter", policy)
    if not _run_constraints(snapshot, policy, marker):
        return ValidationResult((), "none", policy)
    try:
        errors = _constraints(snapshot, policy, env, audit=False, require_root_marker="MEMORY.md" in head)
    except _Unreadable as missing:
        return ValidationResult((f"git show failed for {missing}",), "fatal", policy)
    return ValidationResult(tuple(errors), "constraints" if errors else "none", policy)


def audit_snapshot(
    snapshot: Snapshot, policy: LayoutPolicy, *, config_approved: bool | None = None
) -> ValidationResult:
    """Audit a committed tree (``snapshot.index``) against the tree before it (``snapshot.head``).

    Runs the frontmatter rules and the tree constraints together (S13) and reports every error in
    the audit format; flat skills are judged on what changed since the accepted tree, read-only
    files by the accepted tree's patterns and the committed ones. ``config_approved``: see
    ``_constraints``.
    """
    marker = "MEMORY.md" in snapshot.index
    use_v2 = policy == SHARED_MEMORY or (policy == ROOT_MARKER and marker)
    refused = _name_errors(snapshot)
    if refused:
        return ValidationResult(tuple(refused), "audit", policy)
    try:
        errors = _v2_frontmatter(snapshot, policy) if use_v2 else _legacy_frontmatter(snapshot, audit=True)
        if _run_constraints(snapshot, policy, marker):
            errors += _constraints(
                snapshot, policy, {}, audit=True, require_root_marker=marker, config_approved=config_approved
            )
    except _Unreadable as missing:
        return ValidationResult((f"git show failed for {missing}",), "fatal", policy)
    return ValidationResult(tuple(errors), "audit" if errors else "none", policy)


def validate_staged(
    repo_dir: str | os.PathLike[str],
    *,
    policy: LayoutPolicy | None = None,
    env: Mapping[str, str] | None = None,
    index_file: str | None = None,
) -> ValidationResult:
    """The hook's verdict on ``repo_dir``'s index, in-process (blocking: run it in a worker thread).

    ``policy`` None reads the repository's policy file as the hook does; ``env`` None is this
    process's environment (where the approval variable is looked up); ``index_file`` is the index
    git handed a hook in ``GIT_INDEX_FILE`` (None: the environment's, else the repository's own).
    """
    repo = Path(repo_dir)
    chosen = gitsnapshot.read_policy(repo) if policy is None else policy
    snapshot = gitsnapshot.read_staged_snapshot(repo, index_file)
    return validate_snapshot(snapshot, chosen, os.environ if env is None else env)


def audit_head(
    repo_dir: str | os.PathLike[str],
    *,
    revision: str = "HEAD",
    base: str | None = None,
    config_approved: bool | None = None,
) -> ValidationResult:
    """Audit a committed revision (M8): frontmatter rules and tree constraints, audit report. A tree
    over a cap of ``memfs.gittrees`` (``MAX_TREE_PATHS``…) is invalid with one line naming the cap, found
    without expanding it.

    ``base`` is the accepted tree read-only files are compared with; default the revision's first
    parent (an empty tree for a root commit). ``config_approved`` False: a config change since
    ``base`` is an error (``audit_snapshot``). A repository without commits is valid. The policy is
    resolved as the reference's audit does (MEMFS-1.5).
    """
    repo = Path(repo_dir)
    try:
        snapshot = gitsnapshot.read_commit_snapshot(repo, revision, base)
    except TreeTooLarge as over:
        return ValidationResult((str(over),), "audit", gitsnapshot.read_policy(repo))
    if snapshot is None:
        return ValidationResult((), "none", gitsnapshot.read_policy(repo))
    policy = gitsnapshot.audit_policy(repo, revision, "MEMORY.md" in snapshot.index)
    return audit_snapshot(snapshot, policy, config_approved=config_approved)


def validate_head(repo_dir: str | os.PathLike[str]) -> ValidationResult:
    """``audit_head`` of ``HEAD`` against its parent: is the committed memory valid?"""
    return audit_head(repo_dir)

"""What the last accepted revision of a memory repository protects, and who may change that.

The audit before the model (``agent/audit.py``) judges everything committed since the last
revision it accepted, not each commit against its own parent: an edit of a ``readOnlyFiles`` file
committed with ``--no-verify`` stays an edit however many ordinary commits follow it. The
protection in force is the accepted revision's: a change that drops a pattern is judged by the
patterns on both sides, and a change of ``.memfs.config.json`` counts only when a user approved it
in their own shell. What got in anyway is kept out of the prompt by :func:`repaired_commit`: the
revision's tree with the protected paths as they were accepted.

Both records live in reverie's folder of the git common directory (``names.ACCEPTED_FILE``,
``names.APPROVALS_FILE``), one per repository, shared by its worktrees. Not a ref under
``refs/reverie/``: a commit writes refs, so the bash tool's sandbox leaves ``refs`` writable and a
command could move such a ref over its own edit; the sandbox mounts reverie's folder read-only
(``tools/sandbox.py``), the hook of a command cannot write an approval there, and only reverie and
the user's own shell can. Not the store: the audit runs in worker threads and the hook in a
process of its own, neither of which holds the store. With ``[tools] sandbox = off`` a command can
write there as it can write the hook itself (``tools.sandbox.UNPROTECTED``).

An approval is the pair (config blob before, config blob after), so it survives a rebase; a user
who approved a change once has approved that same change again. Blocking (files, libgit2).
"""

from __future__ import annotations

import contextlib
import os
import threading
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Final

from orchestrator.memfs.constraints import CONFIG_PATH, change_approved, read_only_patterns
from orchestrator.memfs.git import GitRepo
from orchestrator.memfs.glob import compile_glob
from orchestrator.memfs.localrepo import LocalRepo
from orchestrator.memfs.names import ACCEPTED_FILE, APPROVALS_FILE
from orchestrator.memfs.snapshot import Snapshot

__all__ = [
    "Repair",
    "approval_recorded",
    "config_change_approved",
    "pending_approval",
    "read_accepted",
    "record_accepted",
    "record_approval",
    "repaired_commit",
]

_ABSENT: Final = "-"
_REPAIR_MESSAGE: Final = "reverie: protected files as last accepted\n"


@dataclass(frozen=True)
class Repair:
    """A revision with what it changed of the accepted protection put back: ``commit`` (on no
    branch, parent the revision) is what may be compiled; ``paths`` are the files put back."""

    commit: str
    paths: tuple[str, ...]


def read_accepted(common_dir: Path) -> str | None:
    """The commit last accepted in this repository, or None when none was recorded yet."""
    try:
        text = (common_dir / ACCEPTED_FILE).read_text(encoding="ascii").strip()
    except (OSError, UnicodeDecodeError):
        return None
    return text if len(text) in (40, 64) and all(c in "0123456789abcdef" for c in text) else None


def record_accepted(common_dir: Path, commit: str) -> None:
    """Record ``commit`` as accepted (replaced atomically). A folder that cannot be written
    (read-only media) leaves the record as it was: the next audit judges from there again."""
    with contextlib.suppress(OSError):
        _replace(common_dir / ACCEPTED_FILE, f"{commit}\n")


def _replace(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.{threading.get_ident()}.tmp")
    tmp.write_text(text, encoding="ascii")
    os.replace(tmp, path)


def _key(before: str | None, after: str | None) -> str:
    return f"{before or _ABSENT} {after or _ABSENT}"


def approval_recorded(common_dir: Path, before: str | None, after: str | None) -> bool:
    """Whether a user approved changing the config blob ``before`` into ``after`` (None: absent)."""
    try:
        lines = (common_dir / APPROVALS_FILE).read_text(encoding="ascii").splitlines()
    except (OSError, UnicodeDecodeError):
        return False
    return _key(before, after) in lines


def record_approval(common_dir: Path, before: str | None, after: str | None) -> None:
    """Record the user's approval of changing ``before`` into ``after``. Raises ``OSError`` when
    it cannot be written, as inside the bash tool's sandbox: the hook then refuses the commit."""
    if approval_recorded(common_dir, before, after):
        return
    path = common_dir / APPROVALS_FILE
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("a", encoding="ascii") as out:
        out.write(_key(before, after) + "\n")


def pending_approval(snapshot: Snapshot, env: Mapping[str, str]) -> tuple[str | None, str | None] | None:
    """The config change a commit makes on the strength of the approval variable, as
    (blob before, blob after); None when it changes no config or has no approval."""
    before, after = (snapshot.head or {}).get(CONFIG_PATH), snapshot.index.get(CONFIG_PATH)
    if before == after or not change_approved(env):
        return None
    return (None if before is None else before.oid), (None if after is None else after.oid)


def _config_oid(files: Mapping[str, tuple[str, str]]) -> str | None:
    found = files.get(CONFIG_PATH)
    return None if found is None else found[1]


def config_change_approved(local: LocalRepo, common_dir: Path, base: str, revision: str) -> bool:
    """Whether ``revision``'s config is ``base``'s, or a change of it a user approved."""
    before, after = (_config_at(local, rev) for rev in (base, revision))
    return before == after or approval_recorded(common_dir, before, after)


def _config_at(local: LocalRepo, revision: str) -> str | None:
    resolved = local.resolve(revision)
    if resolved is None:
        return None
    found = local.entry(resolved[1], CONFIG_PATH)
    return found[0] if found is not None and found[1] == "blob" else None


def _protected(
    accepted: Mapping[str, tuple[str, str]], files: Mapping[str, tuple[str, str]], patterns: Iterable[str]
) -> list[str]:
    compiled = [compile_glob(p) for p in dict.fromkeys(patterns)]
    if not compiled:
        return []
    paths = [*accepted, *(p for p in files if p not in accepted)]
    return [p for p in paths if accepted.get(p) != files.get(p) and any(c.fullmatch(p) for c in compiled)]


def repaired_commit(memory_dir: Path, accepted: str, revision: str) -> Repair | None:
    """``revision`` with the files the accepted protection covers (the ``readOnlyFiles`` of both
    configs) as ``accepted`` has them, and the config too when its change was not approved; None
    when ``revision`` changes none of them (or a revision is unknown)."""
    with GitRepo(memory_dir).open() as local:
        if local is None or local.resolve(accepted) is None or local.resolve(revision) is None:
            return None
        before, after = local.file_map(accepted), local.file_map(revision)
        patterns = [*_patterns(local, before), *_patterns(local, after)]
        paths = _protected(before, after, patterns)
        if _config_oid(before) != _config_oid(after) and not approval_recorded(
            local.common_dir, _config_oid(before), _config_oid(after)
        ):
            paths.append(CONFIG_PATH)
        if not paths:
            return None
        commit = local.overlay_commit(revision, {p: before.get(p) for p in paths}, _REPAIR_MESSAGE)
        return Repair(commit, tuple(paths))


def _patterns(local: LocalRepo, files: Mapping[str, tuple[str, str]]) -> tuple[str, ...]:
    oid = _config_oid(files)
    return () if oid is None else read_only_patterns(local.read_blob(oid))

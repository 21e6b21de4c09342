"""The commits between two revisions of a memory repository, one by one, with what each changed
(V2): what a session publishes as ``memory.commit`` events when ``HEAD`` moves.

Read in-process (libgit2), oldest first, each against its first parent: a commit that only removed
files is a deletion (``delete_memory`` in telemetry), anything else an update. Each carries what its
own ``Reverie-*`` trailers say (H1), parsed from the message libgit2 already read, so naming a
change's source costs no git process.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from orchestrator.memfs.errors import GitError
from orchestrator.memfs.git import GitRepo
from orchestrator.memfs.localrepo import LocalRepo
from orchestrator.memfs.provenance import Provenance, parse

__all__ = ["MemoryChange", "changes_between"]

_MAX = 200
"""At most this many commits are described at once (the newest); a bigger jump is a pull or a
reset that no one reads commit by commit."""


@dataclass(frozen=True)
class MemoryChange:
    """One commit: its id, its first parent (None for a root), its subject line, the paths it
    changed, whether it only removed files, and its trailers' provenance (``outside`` without)."""

    commit: str
    parent: str | None
    subject: str
    files: tuple[str, ...]
    deleted_only: bool
    provenance: Provenance = Provenance()


def _describe(local: LocalRepo, commit: str) -> MemoryChange:
    found = local.read(commit)
    text = found[1].decode("utf-8", "replace") if found is not None else ""
    header, _, message = text.partition("\n\n")
    parents = [line.split(" ", 1)[1] for line in header.splitlines() if line.startswith("parent ")]
    parent = parents[0] if parents else None
    files = local.changed_paths(parent, commit) if parent else tuple(sorted(local.file_map(commit)))
    resolved = local.resolve(commit)
    tree = resolved[1] if resolved is not None else None
    deleted_only = bool(files) and tree is not None and all(local.entry(tree, path) is None for path in files)
    subject = message.strip().split("\n", 1)[0]
    return MemoryChange(commit, parent, subject, tuple(files), deleted_only, parse(message))


def changes_between(repo: Path, old: str | None, new: str) -> tuple[MemoryChange, ...]:
    """The commits ``new`` holds that ``old`` does not, oldest first (blocking); empty when either
    cannot be read (a revision gone, not a repository)."""

    def read(local: LocalRepo) -> tuple[MemoryChange, ...]:
        commits = local.commits(old, new)[-_MAX:]
        return tuple(_describe(local, commit) for commit in commits)

    try:
        return GitRepo(repo).read(read)
    except GitError:
        return ()

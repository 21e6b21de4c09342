"""Value types for what validation looks at: the index, the accepted tree and blob contents.

A snapshot is plain data so that validation is a pure function (tested without git); the git side
lives in ``gitsnapshot``. Entries carry git object ids; contents are looked up by id in ``blobs``,
which holds at least every Markdown blob of the index and the config blob.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Final

__all__ = [
    "EXECUTABLE_MODE",
    "REGULAR_MODE",
    "SYMLINK_MODE",
    "Entry",
    "Snapshot",
    "Symlink",
    "blob_id",
    "build_snapshot",
    "diff_status",
    "path_order_key",
]

REGULAR_MODE: Final = "100644"
EXECUTABLE_MODE: Final = "100755"
SYMLINK_MODE: Final = "120000"


@dataclass(frozen=True)
class Entry:
    """One tree or index entry: its mode as git prints it (``100644``, ``120000``…) and object id."""

    mode: str
    oid: str

    @property
    def is_regular(self) -> bool:
        return self.mode.startswith("100")


@dataclass(frozen=True)
class Symlink:
    """Input helper for ``build_snapshot``: a symbolic link pointing at ``target``."""

    target: str


@dataclass(frozen=True)
class Snapshot:
    """The staged index, the accepted tree (``HEAD``; None when unborn) and the staged changes.

    ``changes`` maps each path ``git diff --cached --name-status`` reports to its status letter
    (``A``, ``C``, ``M``, ``R``, ``T``, ``D``; a rename is reported under its new path).
    """

    index: Mapping[str, Entry]
    head: Mapping[str, Entry] | None
    blobs: Mapping[str, bytes]
    changes: Mapping[str, str] = field(default_factory=lambda: MappingProxyType({}))

    def staged_bytes(self, path: str) -> bytes | None:
        entry = self.index.get(path)
        return None if entry is None else self.blobs.get(entry.oid)

    def head_bytes(self, path: str) -> bytes | None:
        entry = (self.head or {}).get(path)
        return None if entry is None else self.blobs.get(entry.oid)


def path_order_key(path: str) -> bytes:
    """Git's index order: bytewise on the UTF-8 name (undecodable bytes kept via surrogateescape)."""
    return path.encode("utf-8", "surrogateescape")


def blob_id(data: bytes) -> str:
    """The SHA-1 object id git gives a blob with these bytes."""
    return hashlib.sha1(b"blob %d\0" % len(data) + data, usedforsecurity=False).hexdigest()


def diff_status(index: Mapping[str, Entry], head: Mapping[str, Entry] | None) -> dict[str, str]:
    """Staged changes without rename or copy detection: ``A``, ``M``, ``T`` (type change), ``D``."""
    before = head or {}
    changes: dict[str, str] = {}
    for path in sorted(set(index) | set(before), key=path_order_key):
        new, old = index.get(path), before.get(path)
        if old is None:
            changes[path] = "A"
        elif new is None:
            changes[path] = "D"
        elif new != old:
            changes[path] = "T" if new.mode[:2] != old.mode[:2] else "M"
    return changes


def _entries(files: Mapping[str, bytes | str | Symlink], blobs: dict[str, bytes], executable: set[str]) -> dict[str, Entry]:
    entries: dict[str, Entry] = {}
    for path in sorted(files, key=path_order_key):
        value = files[path]
        if isinstance(value, Symlink):
            data, mode = value.target.encode("utf-8"), SYMLINK_MODE
        else:
            data = value.encode("utf-8") if isinstance(value, str) else value
            mode = EXECUTABLE_MODE if path in executable else REGULAR_MODE
        oid = blob_id(data)
        blobs[oid] = data
        entries[path] = Entry(mode, oid)
    return entries


def build_snapshot(
    index: Mapping[str, bytes | str | Symlink],
    head: Mapping[str, bytes | str | Symlink] | None = None,
    *,
    executable: frozenset[str] = frozenset(),
    changes: Mapping[str, str] | None = None,
) -> Snapshot:
    """A snapshot from file contents (text is UTF-8 encoded); statuses computed unless given."""
    blobs: dict[str, bytes] = {}
    staged = _entries(index, blobs, set(executable))
    accepted = None if head is None else _entries(head, blobs, set(executable))
    status = diff_status(staged, accepted) if changes is None else dict(changes)
    return Snapshot(
        index=MappingProxyType(staged),
        head=None if accepted is None else MappingProxyType(accepted),
        blobs=MappingProxyType(blobs),
        changes=MappingProxyType(status),
    )

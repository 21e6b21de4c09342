"""What a committed tree holds, and the caps every walk of one stops at (A11).

A git tree can name the same subtree many times, so a few hundred bytes of tree objects can stand
for 10^7 paths or a file nested thousands of folders deep: every walk reverie makes counts what it
reaches with a :class:`TreeCount` and stops with :class:`TreeTooLarge` at the first cap passed
(``docs/architecture.md``, "Bounded trees"). The entries themselves (:class:`TreeEntry`,
:class:`Revision`) are what the in-process reader hands out.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Final

from orchestrator.memfs.errors import GitError

__all__ = [
    "MAX_TREE_BYTES",
    "MAX_TREE_DEPTH",
    "MAX_TREE_PATHS",
    "TREE_MODE",
    "Revision",
    "TreeCount",
    "TreeEntry",
    "TreeTooLarge",
    "display_path",
]

TREE_MODE: Final = "40000"
_SYMLINK_MODE: Final = "120000"
_GITLINK_MODE: Final = "160000"



@dataclass(frozen=True, slots=True)
class Revision:
    """A resolved commit and its root tree (both full hex object ids)."""

    commit: str
    tree: str


@dataclass(frozen=True, slots=True)
class TreeEntry:
    """One tree entry; ``path`` is repository-relative with ``/`` separators, exactly the bytes
    stored in the tree decoded as UTF-8 (M2, S14): no quoting, no trimming; bytes that
    are not UTF-8 are kept with ``surrogateescape`` so the name round-trips (:func:`display_path`
    gives printable text)."""

    path: str
    mode: str
    oid: str

    @property
    def name(self) -> str:
        return self.path.rpartition("/")[2]

    @property
    def is_tree(self) -> bool:
        return self.mode == TREE_MODE

    @property
    def is_symlink(self) -> bool:
        return self.mode == _SYMLINK_MODE

    @property
    def is_submodule(self) -> bool:
        return self.mode == _GITLINK_MODE

    @property
    def is_regular_file(self) -> bool:
        return self.mode.startswith("100")

    @property
    def is_blob(self) -> bool:
        """A file or a symlink (read as its target text)."""
        return self.is_regular_file or self.is_symlink


def display_path(path: str) -> str:
    """``path`` as printable text: undecodable bytes (kept as surrogates) become U+FFFD."""
    try:
        path.encode("utf-8")
    except UnicodeEncodeError:
        return path.encode("utf-8", "surrogateescape").decode("utf-8", "replace")
    return path


MAX_TREE_PATHS: Final = 50_000
"""Entries (files and folders) one walk of a committed tree lists before it stops. Real memory is
tens to a few thousand files; a tree object can name the same subtree many times, so ~100 bytes of
objects can stand for 10^7 paths, and listing them all cost every turn (A11)."""
MAX_TREE_DEPTH: Final = 256
"""Path segments one entry may have. The layout's own limit (``maxDepth``) is a handful; a chain of
thousands of one-entry trees is a few hundred bytes and would nest deeper than any walk should go."""
MAX_TREE_BYTES: Final = 8 * 1024 * 1024
"""Bytes of path names (UTF-8, as stored) one walk lists: what its listing holds in memory, so long
names at the path cap cannot make it gigabytes."""


class TreeTooLarge(GitError):
    """A committed tree over one of the caps above, found while counting (nothing past the cap is
    read). ``str()`` is one line naming the cap and the path where it was reached; ``cap`` is the
    constant's name."""

    def __init__(self, cap: str, detail: str, path: str, cwd: Path | str | None = None) -> None:
        super().__init__(("ls-tree",), 128, f"fatal: {detail}", cwd)
        self.cap = cap
        self.path = path
        self.args = (f"{_shown(path)}: the committed tree {detail} ({cap}); it is not read further",)


def _shown(path: str) -> str:
    """``path`` on one short line: control characters escaped, the middle of a long one left out."""
    text = "".join(ch if ch.isprintable() else ascii(ch)[1:-1] for ch in display_path(path))
    return text if len(text) <= 160 else f"{text[:100]}…{text[-50:]}"


class TreeCount:
    """The running count of one walk: :meth:`add` each entry as it is reached, before anything
    below it is read, and it raises :class:`TreeTooLarge` at the first cap passed."""

    def __init__(self, cwd: Path | str | None = None) -> None:
        self.paths = 0
        self.bytes = 0
        self._cwd = cwd

    def add(self, path: str, depth: int) -> None:
        """Count ``path``, ``depth`` segments deep."""
        self.paths += 1
        self.bytes += len(path.encode("utf-8", "surrogateescape")) + 1
        if depth > MAX_TREE_DEPTH:
            raise TreeTooLarge("MAX_TREE_DEPTH", f"nests deeper than {MAX_TREE_DEPTH} folders", path, self._cwd)
        if self.paths > MAX_TREE_PATHS:
            raise TreeTooLarge("MAX_TREE_PATHS", f"holds more than {MAX_TREE_PATHS} paths", path, self._cwd)
        if self.bytes > MAX_TREE_BYTES:
            raise TreeTooLarge("MAX_TREE_BYTES", f"has more than {MAX_TREE_BYTES} bytes of path names", path, self._cwd)

    def width(self, path: str, entries: int) -> None:
        """A tree at ``path`` with ``entries`` entries, checked before they are parsed."""
        if self.paths + entries > MAX_TREE_PATHS:
            raise TreeTooLarge("MAX_TREE_PATHS", f"holds more than {MAX_TREE_PATHS} paths", path or "/", self._cwd)

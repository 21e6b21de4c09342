"""Read committed memory in-process (libgit2 through the git seam), one reader per repository.

The compiler runs every turn, so spawning ``git show`` per file would dominate its cost. Each
repository gets one object reader: an in-process libgit2 handle (``memfs.git.LocalRepo``) plus
caches of parsed trees and small blobs, used under a lock because libgit2 handles are not
thread-safe. Readers live in an LRU pool (DECISIONS S26) so a thousand memory repositories keep a
bounded number of open handles and caches. No git process is started: the old persistent
``cat-file --batch`` reader's start-up was most of the cost of a cold compile.

Tree objects are parsed here, so names are exactly the bytes stored in the tree decoded as UTF-8
(DECISIONS M2, S14): no quoting, no trimming. Bytes that are not UTF-8 are kept with
``surrogateescape`` so the name round-trips to the stored bytes; renderers that need printable
text re-decode it (``display_path``).

"No revision" (memfs.md 3.2 step A, R3.6 / DECISIONS M6) covers: a missing directory, a
directory that is not a git repository, one that is not the repository's top level (for example
a plain folder inside another repository), a repository without commits, and a revision that does
not name a commit.
"""

from __future__ import annotations

import os
from collections import OrderedDict
from collections.abc import Iterator
from contextlib import AbstractContextManager, contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Final

from orchestrator.base.errors import UsageError
from orchestrator.memfs.git import GitError, LocalRepo, PathLRU, open_local, parse_tree

__all__ = [
    "DEFAULT_POOL",
    "ObjectReader",
    "ReaderPool",
    "Revision",
    "TreeEntry",
    "display_path",
    "list_tree_entries",
    "open_reader",
    "read_tree_files",
]

_TREE_MODE: Final = "40000"
_SYMLINK_MODE: Final = "120000"
_GITLINK_MODE: Final = "160000"
_SHA1_BYTES: Final = 20


@dataclass(frozen=True, slots=True)
class Revision:
    """A resolved commit and its root tree (both full hex object ids)."""

    commit: str
    tree: str


@dataclass(frozen=True, slots=True)
class TreeEntry:
    """One tree entry; ``path`` is repository-relative with ``/`` separators, exactly as stored."""

    path: str
    mode: str
    oid: str

    @property
    def name(self) -> str:
        return self.path.rpartition("/")[2]

    @property
    def is_tree(self) -> bool:
        return self.mode == _TREE_MODE

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


class ObjectReader:
    """Object access for one repository over an in-process libgit2 handle.

    Not thread-safe on its own: obtain it through ``ReaderPool.open``, which holds its lock.
    Trees are immutable, so parsed trees and index look-ups are cached by object id.
    """

    _TREE_CACHE_ENTRIES: Final = 20_000
    _LOOKUP_CACHE_SIZE: Final = 4_096
    _BLOB_CACHE_BYTES: Final = 2 * 1024 * 1024
    _BLOB_CACHE_MAX_BLOB: Final = 128 * 1024

    def __init__(self, local: LocalRepo) -> None:
        self.git_dir = local.git_dir
        self.top_level = local.top_level
        self.lock = local.lock
        self._local = local
        self._trees: OrderedDict[str, tuple[tuple[str, str, str], ...]] = OrderedDict()
        self._cached_tree_entries = 0
        self._lookups: OrderedDict[tuple[str, str], tuple[str, str] | None] = OrderedDict()
        self._blobs: OrderedDict[str, bytes] = OrderedDict()
        self._cached_blob_bytes = 0
        self.evicted = False

    def close(self) -> None:
        """Drop the caches (the libgit2 handle closes its files when it is collected)."""
        self._trees.clear()
        self._lookups.clear()
        self._blobs.clear()
        self._cached_tree_entries = self._cached_blob_bytes = 0

    def resolve(self, revision: str = "HEAD") -> Revision | None:
        """The commit ``revision`` names (peeled) and its tree, or None."""
        if not revision or "\n" in revision or any(ch.isspace() for ch in revision):
            return None
        found = self._local.resolve(revision)
        return None if found is None else Revision(commit=found[0], tree=found[1])

    def _tree(self, tree_oid: str) -> tuple[tuple[str, str, str], ...]:
        cached = self._trees.get(tree_oid)
        if cached is not None:
            self._trees.move_to_end(tree_oid)
            return cached
        found = self._local.read(tree_oid)
        if found is None or found[0] != "tree":
            raise GitError(("cat-file",), 128, f"fatal: tree {tree_oid} is missing", self.top_level)
        parsed = parse_tree(found[1])
        if len(parsed) <= self._TREE_CACHE_ENTRIES // 4:
            self._trees[tree_oid] = parsed
            self._cached_tree_entries += len(parsed)
            while self._cached_tree_entries > self._TREE_CACHE_ENTRIES:
                _, dropped = self._trees.popitem(last=False)
                self._cached_tree_entries -= len(dropped)
        return parsed

    def tree_entries(self, tree_oid: str, prefix: str = "") -> list[TreeEntry]:
        """Entries of one tree, in stored (git) order; ``prefix`` is the tree's own path."""
        lead = f"{prefix}/" if prefix else ""
        return [TreeEntry(lead + name, mode, oid) for name, mode, oid in self._tree(tree_oid)]

    def lookup(self, tree_oid: str, name: str) -> tuple[str, str] | None:
        """(oid, object type) of the entry ``name`` directly inside ``tree_oid``, without listing it.

        Git resolves ``<tree>:<name>`` itself, so a directory with thousands of entries costs one
        small look-up (libgit2 searches the sorted tree).
        """
        key = (tree_oid, name)
        if key in self._lookups:
            self._lookups.move_to_end(key)
            return self._lookups[key]
        result: tuple[str, str] | None = None
        if "\n" not in name and name not in ("", ".", ".."):
            result = self._local.entry(tree_oid, name)
        self._lookups[key] = result
        if len(self._lookups) > self._LOOKUP_CACHE_SIZE:
            self._lookups.popitem(last=False)
        return result

    def walk(self, tree_oid: str, prefix: str = "") -> Iterator[TreeEntry]:
        """Every non-tree entry below ``tree_oid``, recursively, in ``git ls-tree -r`` order."""
        for entry in self.tree_entries(tree_oid, prefix):
            if entry.is_tree:
                yield from self.walk(entry.oid, entry.path)
            else:
                yield entry

    def read_blob(self, oid: str) -> bytes | None:
        """The blob's bytes (a symlink's target text), or None if it is missing or not a blob.

        Small blobs are cached by object id: the same core files are read on every turn.
        """
        cached = self._blobs.get(oid)
        if cached is not None:
            self._blobs.move_to_end(oid)
            return cached
        found = self._local.read(oid)
        if found is None or found[0] != "blob":
            return None
        data = found[1]
        if len(data) <= self._BLOB_CACHE_MAX_BLOB:
            self._blobs[oid] = data
            self._cached_blob_bytes += len(data)
            while self._cached_blob_bytes > self._BLOB_CACHE_BYTES:
                _, dropped = self._blobs.popitem(last=False)
                self._cached_blob_bytes -= len(dropped)
        return data


def _identity(directory: Path) -> tuple[int, int] | None:
    try:
        st = (directory / ".git").stat()
    except OSError:
        return None
    return st.st_dev, st.st_ino


class ReaderPool:
    """At most ``max_readers`` live readers (a libgit2 handle and caches each), LRU evicted.

    Keyed as the repository pool is (:class:`~orchestrator.memfs.git.PathLRU`): by real path, a
    reader re-created when the directory's ``.git`` is replaced.
    """

    def __init__(self, max_readers: int = 64) -> None:
        if max_readers < 1:
            raise UsageError("max_readers must be at least 1")
        self.max_readers = max_readers
        self._readers: PathLRU[ObjectReader] = PathLRU(max_readers)

    def __len__(self) -> int:
        return len(self._readers)

    def _retire(self, reader: ObjectReader) -> None:
        reader.evicted = True
        if reader.lock.acquire(blocking=False):
            try:
                reader.close()
            finally:
                reader.lock.release()

    def _get(self, directory: Path) -> ObjectReader | None:
        identity = _identity(directory)
        if identity is None:
            return None
        key, held = self._readers.find(directory, identity)
        if held is not None:
            return held
        local = open_local(Path(key))
        if local is None:
            return None
        reader = ObjectReader(local)
        for old in self._readers.put(key, identity, reader):
            self._retire(old)
        return reader

    @contextmanager
    def open(self, memory_dir: str | os.PathLike[str]) -> Iterator[ObjectReader | None]:
        """The locked reader for ``memory_dir``, or None when it is not a repository top level."""
        reader = self._get(Path(memory_dir))
        if reader is None:
            yield None
            return
        with reader.lock:
            try:
                yield reader
            finally:
                if reader.evicted:
                    reader.close()

    def close_all(self) -> None:
        """Drop every reader and its caches (at shutdown, in tests, before a cold bench)."""
        for reader in self._readers.clear():
            self._retire(reader)


DEFAULT_POOL: Final = ReaderPool()


def open_reader(memory_dir: str | os.PathLike[str]) -> AbstractContextManager[ObjectReader | None]:
    """``DEFAULT_POOL.open(memory_dir)``."""
    return DEFAULT_POOL.open(memory_dir)


def list_tree_entries(memory_dir: str | os.PathLike[str], revision: str = "HEAD") -> list[TreeEntry] | None:
    """Every file entry (blobs, symlinks, submodules) at ``revision``, as ``git ls-tree -r -z``.

    None when there is no revision. Raises ``GitError`` if git fails mid-walk.
    """
    with open_reader(memory_dir) as reader:
        if reader is None:
            return None
        resolved = reader.resolve(revision)
        if resolved is None:
            return None
        return list(reader.walk(resolved.tree))


def read_tree_files(
    memory_dir: str | os.PathLike[str], revision: str = "HEAD", *, markdown_only: bool = False
) -> dict[str, bytes] | None:
    """Path to content of every blob at ``revision`` (symlinks give their target text).

    Submodule entries are skipped (their commits are not in this repository). None when there is
    no revision. Raises ``GitError`` if git fails mid-walk.
    """
    with open_reader(memory_dir) as reader:
        if reader is None:
            return None
        resolved = reader.resolve(revision)
        if resolved is None:
            return None
        files: dict[str, bytes] = {}
        for entry in reader.walk(resolved.tree):
            if not entry.is_blob or (markdown_only and not entry.path.endswith(".md")):
                continue
            data = reader.read_blob(entry.oid)
            if data is not None:
                files[entry.path] = data
        return files

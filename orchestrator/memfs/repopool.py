"""The pool of open repositories: at most one :class:`~orchestrator.memfs.localrepo.LocalRepo` per
repository in this process (S26), keyed by its real path and the identity of its ``.git``, the
least recently used let go first, each locked to one thread at a time while in use. The repository
object of :mod:`orchestrator.memfs.git` opens through :data:`REPOS`.
"""

from __future__ import annotations

import os
import threading
from collections import OrderedDict
from collections.abc import Hashable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Final, Generic, TypeVar

from orchestrator.base.errors import UsageError
from orchestrator.memfs import guard
from orchestrator.memfs.libgit import libgit2, open_top
from orchestrator.memfs.localrepo import LocalRepo

__all__ = ["REPOS", "PathLRU", "RepoPool", "open_local"]

V = TypeVar("V")


def _identity(directory: Path) -> tuple[int, int, int] | None:
    try:
        st = (directory / ".git").stat()
    except OSError:
        return None
    return st.st_dev, st.st_ino, st.st_mode


class PathLRU(Generic[V]):
    """Handles keyed by a directory's real path, least recently used first, each held with the
    identity of the ``.git`` it was opened on, so a repository deleted and re-created at the same
    path is opened afresh. ``realpath`` lstats every component (the largest cost of a pooled open),
    so a spelling seen before is trusted while its identity still matches the held handle's."""

    def __init__(self, size: int) -> None:
        if size < 1:
            raise UsageError("size must be at least 1")
        self.size = size
        self._lock = threading.Lock()
        self._held: OrderedDict[str, tuple[Hashable, V]] = OrderedDict()
        self._real: dict[str, str] = {}

    def __len__(self) -> int:
        with self._lock:
            return len(self._held)

    def find(self, directory: Path, identity: Hashable) -> tuple[str, V | None]:
        """The real path of ``directory`` and the handle held for it, if still of ``identity``."""
        spelled = os.fspath(directory)
        with self._lock:
            key = self._real.get(spelled)
            found = self._fresh(key, identity) if key is not None else None
            if key is not None and found is not None:
                return key, found
        key = os.path.realpath(directory)
        with self._lock:
            if len(self._real) >= 4 * self.size:
                self._real.clear()
            self._real[spelled] = key
            return key, self._fresh(key, identity)

    def _fresh(self, key: str, identity: Hashable) -> V | None:
        held = self._held.get(key)
        if held is None or held[0] != identity:
            return None
        self._held.move_to_end(key)
        return held[1]

    def put(self, key: str, identity: Hashable, handle: V) -> list[V]:
        """Hold ``handle``; returns those it displaced (the one it replaces, the oldest beyond ``size``)."""
        dropped: list[V] = []
        with self._lock:
            previous = self._held.pop(key, None)
            if previous is not None:
                dropped.append(previous[1])
            self._held[key] = (identity, handle)
            while len(self._held) > self.size:
                dropped.append(self._held.popitem(last=False)[1][1])
        return dropped

    def pop(self, directory: Path) -> V | None:
        """Stop holding the handle of ``directory`` (any spelling of it); returns it, if one was held."""
        spelled = os.fspath(directory)
        with self._lock:
            key = self._real.pop(spelled, None)
        key = key or os.path.realpath(directory)
        with self._lock:
            held = self._held.pop(key, None)
            for stale in [s for s, k in self._real.items() if k == key]:
                del self._real[stale]
        return None if held is None else held[1]

    def clear(self) -> list[V]:
        """Forget everything; returns the handles that were held."""
        with self._lock:
            handles = [held[1] for held in self._held.values()]
            self._held.clear()
            self._real.clear()
        return handles


class RepoPool:
    """At most ``size`` open repositories, least recently used closed first (S26).

    Keyed by the directory's real path (:class:`PathLRU`). Only a repository's top level opens: a
    plain folder inside another repository is "no repository" (M6).
    """

    def __init__(self, size: int = 256) -> None:
        self._handles: PathLRU[LocalRepo] = PathLRU(size)
        self.size = size

    def __len__(self) -> int:
        return len(self._handles)

    def _get(self, directory: Path) -> LocalRepo | None:
        identity = _identity(directory)
        if identity is None:
            return None
        key, held = self._handles.find(directory, identity)
        if held is not None:
            return held
        opened = open_local(Path(key))
        if opened is None:
            return None
        for old in self._handles.put(key, identity, opened):
            _retire(old)
        return opened

    @contextmanager
    def open(self, directory: str | os.PathLike[str]) -> Iterator[LocalRepo | None]:
        """The repository whose top level is ``directory``, locked for this thread; else None."""
        repo = self._get(Path(directory))
        if repo is None:
            yield None
            return
        with repo.lock:
            try:
                yield repo
            finally:
                if repo.evicted:
                    repo.forget()

    def discard(self, directory: str | os.PathLike[str]) -> None:
        """Let go of ``directory``'s handle now, before the folder is deleted: a removed worktree's
        handle would otherwise stay among the ``size`` held until pushed out, with libgit2's memory
        (compaction and reflection make a worktree on most turns of a long session: +16 MB of heap per
        500 turns of bench/soak.py, 470 ``pygit2.Repository`` objects)."""
        held = self._handles.pop(Path(directory))
        if held is not None:
            _retire(held)

    def close_all(self) -> None:
        """Forget every handle and its caches (libgit2 closes files when the last reference goes):
        at shutdown, in tests, before a cold bench."""
        for repo in self._handles.clear():
            _retire(repo)


def _retire(repo: LocalRepo) -> None:
    """Mark ``repo`` let go; its caches are dropped now, or by its user when it is in use."""
    repo.evicted = True
    if repo.lock.acquire(blocking=False):
        try:
            repo.forget()
        finally:
            repo.lock.release()


def open_local(directory: Path) -> LocalRepo | None:
    """A new handle on the repository whose top level is ``directory`` (resolved), else None; the
    caller owns it (pooled callers open through :data:`REPOS`). The guard checks the layout first, as for
    a git process (libgit2 would follow a planted ``commondir`` too); a refused one raises
    :class:`~orchestrator.memfs.guard.RepositoryRefused`."""
    guard.locate(directory)
    pygit2 = libgit2()
    try:
        handle = open_top(directory)
    except (pygit2.GitError, KeyError, ValueError, OSError):
        return None
    workdir = handle.workdir
    if workdir is None or Path(workdir).resolve() != directory:
        return None
    return LocalRepo(handle, directory)


REPOS: Final = RepoPool()

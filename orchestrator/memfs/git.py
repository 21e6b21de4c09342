"""The git seam's face: one :class:`GitRepo` per repository, the one way reverie reaches git (G1).

Reads go through libgit2 in-process (:meth:`GitRepo.open`, :meth:`GitRepo.read`, :meth:`GitRepo.ask`),
the git CLI through the process runner (:meth:`GitRepo.run`, :meth:`GitRepo.arun`, whose thread is
never abandoned, so a cancelled caller never leaves a half-written index). The repository lock (D1)
is a separate object (:mod:`orchestrator.memfs.locks`), taken by the caller around many calls. What
``harness`` and ``retry`` do and the seam's other modules are in docs/architecture.md, "The git
seam's face"."""

from __future__ import annotations

import functools
import os
from collections.abc import Callable, Mapping
from contextlib import AbstractContextManager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final, TypeVar

from orchestrator.base import blocking
from orchestrator.memfs import gitprocess
from orchestrator.memfs.errors import GitError
from orchestrator.memfs.gitdir import is_repository
from orchestrator.memfs.gitprocess import LOCAL_TIMEOUT, GitResult
from orchestrator.memfs.gittrees import TreeEntry
from orchestrator.memfs.indexlock import clear_stale_lock_files, is_lock_contention, lock_file_in
from orchestrator.memfs.localrepo import LocalRepo
from orchestrator.memfs.repopool import REPOS

__all__ = ["INDEX_LOCK_ATTEMPTS", "GitRepo"]

T = TypeVar("T")
R = TypeVar("R")

INDEX_LOCK_ATTEMPTS: Final = 12
"""Tries of a writing command while another process holds one of git's lock files (about 10 s)."""


@dataclass(frozen=True, init=False)
class GitRepo:
    """One repository as reverie reaches it: ``path`` is its top level (a main checkout or a
    linked worktree). Cheap to make; the libgit2 handle behind it is pooled per repository."""

    path: Path

    def __init__(self, path: str | os.PathLike[str]) -> None:
        object.__setattr__(self, "path", Path(path))

    @property
    def exists(self) -> bool:
        """Whether there is a repository at :attr:`path` at all (a ``.git`` there)."""
        return is_repository(self.path)

    def open(self) -> AbstractContextManager[LocalRepo | None]:
        """The in-process handle, locked for this thread; None when :attr:`path` is not a
        repository's top level (a plain folder inside one is "no repository", M6). Blocking."""
        return REPOS.open(self.path)

    def read(self, question: Callable[[LocalRepo], T]) -> T:
        """``question(handle)`` (blocking); :class:`GitError` when :attr:`path` is not a repository's
        top level."""
        with REPOS.open(self.path) as local:
            if local is None:
                raise GitError(("rev-parse",), 128, "fatal: not the top level of a git repository", self.path)
            return question(local)

    async def ask(self, question: Callable[[LocalRepo], T]) -> T:
        """:meth:`read` in a worker thread behind the ``git`` limiter, for async callers, e.g.
        ``await GitRepo(worktree).ask(lambda repo: repo.commits(head, tip))``."""
        return await blocking.run_sync("git", functools.partial(self.read, question))

    def run(
        self,
        *args: str,
        check: bool = True,
        env: Mapping[str, str] | None = None,
        input: bytes | str | None = None,
        git_timeout: float = LOCAL_TIMEOUT,
        harness: bool = False,
        inherit_location: bool = False,
        retry: bool = False,
    ) -> GitResult:
        """``git <args>`` in :attr:`path` (blocking): :func:`orchestrator.memfs.gitprocess.run`, and
        with ``retry`` git's lock-file contention retried (module docstring)."""
        call = functools.partial(
            gitprocess.run, self.path, *args, check=check and not retry, env=env, input=input,
            git_timeout=git_timeout, harness=harness, inherit_location=inherit_location,
        )
        if not retry:
            return call()
        # lazy: tenacity is for writing commands, not for the reads of `chat -p` start-up
        from tenacity import Retrying

        result: GitResult | None = None
        for attempt in _on_contention(Retrying):
            with attempt:
                result = call()
                if _locked(result):
                    self._clear_named_lock(result)
            _settle(attempt.retry_state, result)
        assert result is not None
        return _checked(args, result, check, self.path)

    async def arun(
        self,
        *args: str,
        check: bool = True,
        env: Mapping[str, str] | None = None,
        input: bytes | str | None = None,
        git_timeout: float = LOCAL_TIMEOUT,
        harness: bool = False,
        retry: bool = False,
    ) -> GitResult:
        """:meth:`run` in a worker thread behind the ``git`` limiter (``base.blocking``); with
        ``retry``, the waits between tries are on the event loop, holding no worker."""
        call = functools.partial(
            gitprocess.run, self.path, *args, check=check and not retry, env=env, input=input,
            git_timeout=git_timeout, harness=harness,
        )
        if not retry:
            return await blocking.run_sync("git", call)
        # lazy: as in run
        from tenacity import AsyncRetrying

        result: GitResult | None = None
        async for attempt in _on_contention(AsyncRetrying):
            with attempt:
                result = await blocking.run_sync("git", call)
                if _locked(result):
                    await blocking.run_sync("files", functools.partial(self._clear_named_lock, result))
            _settle(attempt.retry_state, result)
        assert result is not None
        return _checked(args, result, check, self.path)

    def _clear_named_lock(self, result: GitResult) -> None:
        """Remove the lock file git named in its refusal, when nothing holds it any more."""
        named = lock_file_in(result.stderr)
        if named is not None:
            clear_stale_lock_files([named], roots=(self.path,))

    def common_dir(self) -> Path:
        """The resolved git common directory (in-process for a repository's top level, else asked of
        git, which also searches parent folders); :class:`GitError` when there is none. Blocking."""
        with REPOS.open(self.path) as local:
            if local is not None:
                return local.common_dir
        out = gitprocess.run(self.path, "rev-parse", "--path-format=absolute", "--git-common-dir")
        return Path(out.stdout.strip()).resolve()

    def tree_entries(self, revision: str = "HEAD") -> list[TreeEntry] | None:
        """Every file entry (blobs, symlinks, submodules) at ``revision``, as ``git ls-tree -r -z``.

        None when there is no revision ("no revision", MEMFS-3.2 step A / M6: a missing directory,
        not a repository, not its top level, no commits, a name that is no commit). Blocking.
        :class:`GitError` if libgit2 fails mid-walk."""
        with REPOS.open(self.path) as repo:
            if repo is None:
                return None
            resolved = repo.revision(revision)
            return None if resolved is None else list(repo.walk(resolved.tree))

    def tree_files(self, revision: str = "HEAD", *, markdown_only: bool = False) -> dict[str, bytes] | None:
        """Path to content of every blob at ``revision`` (symlinks give their target text);
        submodule entries are skipped (their commits are not in this repository). None when there
        is no revision (as :meth:`tree_entries`). Blocking. :class:`GitError` if libgit2 fails."""
        with REPOS.open(self.path) as repo:
            if repo is None:
                return None
            resolved = repo.revision(revision)
            if resolved is None:
                return None
            files: dict[str, bytes] = {}
            for entry in repo.walk(resolved.tree):
                if not entry.is_blob or (markdown_only and not entry.path.endswith(".md")):
                    continue
                data = repo.read_blob(entry.oid)
                if data is not None:
                    files[entry.path] = data
            return files


def _locked(result: GitResult | None) -> bool:
    return result is not None and not result.ok and is_lock_contention(result.stderr)


def _on_contention(retrying: Callable[..., R]) -> R:
    """tenacity's ``retrying`` (sync or async) for lock-file contention: exponential waits with
    jitter, bounded tries; the last result is kept, not raised (the caller decides what it means)."""
    # lazy: as in GitRepo.run
    from tenacity import retry_if_result, stop_after_attempt, wait_exponential, wait_random

    return retrying(
        stop=stop_after_attempt(INDEX_LOCK_ATTEMPTS),
        wait=wait_exponential(multiplier=0.02, max=2.0) + wait_random(0, 0.02),
        retry=retry_if_result(_locked),
        retry_error_callback=_keep_last,
    )


def _keep_last(_state: Any) -> None:
    return None


def _settle(state: object, result: GitResult | None) -> None:
    """Hand tenacity the attempt's result, so ``retry_if_result`` can judge it."""
    outcome = getattr(state, "outcome", None)
    if outcome is not None and not outcome.failed:
        state.set_result(result)  # type: ignore[attr-defined]


def _checked(args: tuple[str, ...], result: GitResult, check: bool, cwd: Path) -> GitResult:
    if check and not result.ok:
        raise GitError(args, result.returncode, result.stderr or result.stdout, cwd)
    return result

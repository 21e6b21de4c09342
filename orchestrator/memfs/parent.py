"""The parent checkout's branch across a subagent's run: a subagent moves nothing but its own branch.

A subagent's sandbox cannot write the parent's refs, ``packed-refs``, index or reflogs
(``tools.sandbox``). This is the second line, for whatever reaches them anyway (``sandbox = off``,
a git outside reverie): :func:`watch` records the tip of the branch the parent checkout is on
before a subagent runs, and :func:`settle` checks it when the subagent ends. Legitimate moves in
between are the main agent's commits and reverie's own fast-forwards; both are seen as they happen
(:func:`witness`, after each of the main agent's commands and each merge-back) while a watch is
open. The branch is *displaced* when it no longer contains the last tip seen, or when it gained a
commit of the subagent's own branch that no merge-back put there. Then, under the repository lock:

* what the branch held is kept on ``refs/reverie/displaced/<id>`` (nothing is lost);
* the branch is put back on the last tip seen (``git reset --keep``, so the parent's files follow
  and uncommitted edits stay);
* :class:`Displaced` says so in one line, which the caller publishes as a ``memory.warning``.

The main agent's commits made on top of a displaced branch before it was noticed are on that ref.
Blocking parts run in worker threads.
"""

from __future__ import annotations

import os
import threading
from dataclasses import dataclass
from functools import partial
from pathlib import Path

from orchestrator.base import blocking
from orchestrator.memfs.git import GitRepo
from orchestrator.memfs.guard import locate
from orchestrator.memfs.localrepo import LocalRepo
from orchestrator.memfs.locks import merge_lock
from orchestrator.memfs.names import DISPLACED_REF_PREFIX

__all__ = ["Displaced", "Watch", "settle", "watch", "witness"]


@dataclass(frozen=True)
class Watch:
    """The parent checkout ``top`` was on ``ref`` at ``tip`` when subagent ``name`` started."""

    top: Path
    ref: str
    tip: str
    name: str


@dataclass(frozen=True)
class Displaced:
    """``ref`` held ``found`` (not reverie's, nor the main agent's); put back on ``restored``, and
    ``found`` kept on ``kept``. ``message`` is the warning line."""

    ref: str
    found: str
    restored: str
    kept: str
    message: str


_lock = threading.Lock()
_seen: dict[str, list[str]] = {}
_open: dict[str, int] = {}


def _key(top: Path) -> str:
    return os.path.realpath(top)


def _parent_top(checkout: Path) -> Path:
    layout = locate(checkout)
    if layout is None:
        raise FileNotFoundError(f"{checkout}: not a git checkout")
    return layout.common_dir.parent


def _branch(repo: LocalRepo) -> str | None:
    branch = repo.branch()
    return None if branch is None else f"refs/heads/{branch}"


def _start(checkout: Path, name: str) -> Watch | None:
    top = _parent_top(checkout)

    def read(repo: LocalRepo) -> tuple[str | None, str | None]:
        ref = _branch(repo)
        return ref, (repo.ref(ref) if ref is not None else None)

    ref, tip = GitRepo(top).read(read)
    if ref is None or tip is None:
        return None
    with _lock:
        _open[_key(top)] = _open.get(_key(top), 0) + 1
        _seen.setdefault(_key(top), []).append(tip)
    return Watch(top, ref, tip, name)


async def watch(checkout: Path, name: str) -> Watch | None:
    """Record the parent's branch tip before subagent ``name`` runs in ``checkout`` (its worktree,
    or the parent itself); None when the parent is on no branch or has no commit."""
    return await blocking.run_sync("git", partial(_start, Path(checkout), name))


def witness(checkout: Path, tip: str | None = None) -> None:
    """The parent of ``checkout`` moved legitimately (the main agent's command, a merge-back): its
    branch's tip now (``tip`` when the caller knows it) counts as seen. A no-op, without reading
    git, while no subagent of that repository is watched (blocking)."""
    if not _open:
        return
    try:
        top = _parent_top(checkout)
    except (OSError, FileNotFoundError):
        return
    key = _key(top)
    if key not in _open:
        return
    if tip is None:
        tip = GitRepo(top).read(lambda repo: (lambda ref: repo.ref(ref) if ref else None)(_branch(repo)))
    if tip is not None:
        with _lock:
            if key in _seen:
                _seen[key].append(tip)


def _close(key: str) -> list[str]:
    with _lock:
        left = _open.get(key, 0) - 1
        seen = list(_seen.get(key, ()))
        if left <= 0:
            _open.pop(key, None)
            _seen.pop(key, None)
        else:
            _open[key] = left
        return seen


def _judge(top: Path, watched: Watch, seen: list[str], own: str | None) -> tuple[str, str] | None:
    """``(found, last legitimate tip)`` when the branch was displaced, else None."""

    def question(repo: LocalRepo) -> tuple[str, str] | None:
        found = repo.ref(watched.ref)
        chain = [watched.tip]
        for tip in seen:
            if tip != chain[-1] and repo.is_ancestor(chain[-1], tip):
                chain.append(tip)
        last = chain[-1]
        if found is None:
            return ("", last)
        if found == last:
            return None
        if not repo.is_ancestor(last, found):
            return (found, last)
        own_tip = repo.ref(own) if own else None
        if own_tip is not None and set(repo.commits(last, found)) & set(repo.commits(last, own_tip)):
            return (found, last)  # the subagent's own commits, put there without a merge-back
        return None

    return GitRepo(top).read(question)


async def settle(watched: Watch | None, *, own_branch: str | None = None) -> Displaced | None:
    """When subagent ``watched.name`` has ended: put the parent's branch back if it was displaced
    (the module docstring), under the repository lock; None when it was not."""
    if watched is None:
        return None
    seen = _close(_key(watched.top))
    own = f"refs/heads/{own_branch}" if own_branch else None
    async with merge_lock(watched.top):
        judged = await blocking.run_sync("git", partial(_judge, watched.top, watched, seen, own))
        if judged is None:
            return None
        found, last = judged
        kept = f"{DISPLACED_REF_PREFIX}{watched.name}"
        if found:
            await blocking.run_sync("git", partial(GitRepo(watched.top).read, lambda repo: repo.set_ref(kept, found)))
        reset = await GitRepo(watched.top).arun("reset", "-q", "--keep", last, check=False, harness=True)
        if not reset.ok:
            # the parent's files cannot follow (uncommitted edits in the way): the branch still goes back
            ref = watched.ref
            await blocking.run_sync("git", partial(GitRepo(watched.top).read, lambda repo: repo.set_ref(ref, last)))
    short = watched.ref.removeprefix("refs/heads/")
    was = f"to {found[:12]}" if found else "away (deleted)"
    message = (
        f"{watched.top}: {watched.name} moved {short} {was}, which neither reverie nor the agent wrote; "
        f"{short} is back at {last[:12]}" + (f" and what it held is kept on {kept}" if found else "")
    )
    return Displaced(watched.ref, found, last, kept if found else "", message)

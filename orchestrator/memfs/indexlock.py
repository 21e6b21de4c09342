"""Git's own lock files under load and after a crash (D1; A2).

Inside reverie every index- or ref-writing command holds the repository lock, so git's
``index.lock`` (and ref ``.lock`` files) can only be contended by a process outside reverie: an
editor's git integration, a user's shell. Such contention is retried with tenacity
(``GitRepo.run``/``arun`` with ``retry=True``, :mod:`orchestrator.memfs.git`).

A git killed mid-write (``kill -9`` of reverie takes the sandboxed git with it, ``--die-with-parent``)
leaves its lock files behind: ``index.lock``, a pathspec commit's ``next-index-<pid>.lock`` (the
pid is the sandbox's own namespace's, the same on every call, so the next such commit fails too),
``HEAD.lock``, ``packed-refs.lock``, ``refs/**.lock``, a worktree record's. Every later commit
refuses to run. A lock file is *stale* when nothing can still be writing it: no process has it open
(git keeps the file open while it writes) and no git process works in that repository (its working
directory or an open file inside it: git closes a ref's lock before renaming it into place). Pids
are never compared (the sandbox's are meaningless outside), nor ages: a stale lock is removed at
once, with a notice, by whoever holds reverie's repository lock (start-up recovery, reverie's own
commits, the bash tool after each command), so no cooperating writer can be mid-write.
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable
from pathlib import Path
from typing import Final

from orchestrator.memfs.guard import report
from orchestrator.memfs.names import LOCK_FILE_NAME, WORKTREE_LOCK_FILE_NAME

__all__ = [
    "clear_stale_git_locks",
    "clear_stale_lock_files",
    "git_lock_files",
    "is_lock_contention",
    "lock_file_in",
    "open_by_live_process",
]

_LOCKED = re.compile(r"Unable to create '([^']+\.lock)': File exists|cannot lock ref '[^']*': .*'([^']+\.lock)'")


def is_lock_contention(stderr: str) -> bool:
    """Whether git refused because another process holds one of its ``.lock`` files."""
    return _LOCKED.search(stderr) is not None or ("index.lock" in stderr and "File exists" in stderr)


def lock_file_in(stderr: str) -> Path | None:
    """The ``.lock`` file git named in its refusal, if any."""
    found = _LOCKED.search(stderr)
    if found is None:
        return None
    return Path(found.group(1) or found.group(2))


_OWN_LOCKS: Final = frozenset({LOCK_FILE_NAME, WORKTREE_LOCK_FILE_NAME})


def git_lock_files(common: Path) -> list[Path]:
    """Every lock file git may have left in the repository whose common directory is ``common``:
    its top level (not reverie's own ``flock`` files), ``refs``, and each worktree record's top
    level. Blocking: a directory listing each, a walk of ``refs``."""
    found = [common / name for name in _listing(common) if name.endswith(".lock") and name not in _OWN_LOCKS]
    for folder, _dirs, files in os.walk(common / "refs"):
        found.extend(Path(folder) / name for name in files if name.endswith(".lock"))
    for record in _listing(common / "worktrees"):
        found.extend(common / "worktrees" / record / name for name in _listing(common / "worktrees" / record) if name.endswith(".lock"))
    return found


def _listing(folder: Path) -> list[str]:
    try:
        return os.listdir(folder)
    except OSError:
        return []


def open_by_live_process(path: Path) -> bool:
    """Whether any process we can see has ``path`` open (``/proc/*/fd``; blocking)."""
    return bool(_holders([path], ()))


def _holders(paths: list[Path], roots: tuple[Path, ...]) -> set[Path]:
    """Of ``paths``, those some live process holds: has one open, or is a git process whose working
    directory or an open file lies under one of ``roots``, in which case all are held.

    Unreadable ``/proc`` entries (other users' processes) are skipped: git refuses a lock file it
    cannot write anyway, and a memory repository belongs to one user."""
    wanted: dict[tuple[int, int], Path] = {}
    for path in paths:
        try:
            st = os.stat(path)
        except OSError:
            continue
        wanted[(st.st_dev, st.st_ino)] = path
    held: set[Path] = set()
    prefixes = tuple(f"{root}{os.sep}" for root in roots)
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        if roots and _git_in(pid, prefixes):
            return set(wanted.values())
        held.update(_open_among(pid, wanted))
    return held


def _git_in(pid: str, prefixes: tuple[str, ...]) -> bool:
    try:
        with open(f"/proc/{pid}/comm", encoding="utf-8", errors="replace") as comm:
            if not comm.read().startswith("git"):
                return False
        places = [os.readlink(f"/proc/{pid}/cwd")]
    except OSError:
        return False
    for fd in _listing(Path(f"/proc/{pid}/fd")):
        try:
            places.append(os.readlink(f"/proc/{pid}/fd/{fd}"))
        except OSError:
            continue
    return any(f"{place}{os.sep}".startswith(prefixes) for place in places)


def _open_among(pid: str, wanted: dict[tuple[int, int], Path]) -> set[Path]:
    found: set[Path] = set()
    for fd in _listing(Path(f"/proc/{pid}/fd")):
        try:
            info = os.stat(f"/proc/{pid}/fd/{fd}")
        except OSError:
            continue
        held = wanted.get((info.st_dev, info.st_ino))
        if held is not None:
            found.add(held)
    return found


def clear_stale_lock_files(
    paths: list[Path], *, roots: tuple[Path, ...] = (), notify: Callable[[str], None] | None = None
) -> list[Path]:
    """Remove each of ``paths`` that is stale (module docstring); returns those removed (blocking).

    ``roots`` are the repository's top level and git folders: a git process working there holds
    every lock. Call with reverie's repository lock held."""
    present = [path for path in paths if os.path.lexists(path)]
    if not present:
        return []
    held = _holders(present, tuple(Path(os.path.realpath(root)) for root in roots))
    removed: list[Path] = []
    for path in present:
        if path in held:
            continue
        try:
            path.unlink()
        except FileNotFoundError:
            continue
        removed.append(path)
        line = f"removed a stale {path} (left by a git process that is gone; no process holds it)"
        if notify is not None:
            notify(f"reverie: {line}")
        else:
            report(path.parent, line, restored=True)
    return removed


def clear_stale_git_locks(common: Path, top: Path | None = None) -> list[Path]:
    """:func:`clear_stale_lock_files` on every lock file git may have left in the repository whose
    common directory is ``common`` (:func:`git_lock_files`); blocking, under reverie's lock."""
    main = (common,) if top is None else (common, top)
    linked = _checkouts(common)
    everywhere = (*main, *linked.values())
    groups: dict[tuple[Path, ...], list[Path]] = {}
    for lock in git_lock_files(common):
        groups.setdefault(_who_may_hold(lock, common, main, linked, everywhere), []).append(lock)
    removed: list[Path] = []
    for roots, locks in groups.items():
        removed.extend(clear_stale_lock_files(locks, roots=roots))
    return removed


def _who_may_hold(
    lock: Path, common: Path, main: tuple[Path, ...], linked: dict[str, Path], everywhere: tuple[Path, ...]
) -> tuple[Path, ...]:
    """Where a git holding ``lock`` runs. git may close a lock file before renaming it into place
    (``commit -a`` closes ``index.lock``, then commits), so a live git working in the right
    checkout keeps it: a linked worktree's ``index.lock`` or ``HEAD.lock`` belongs to a git in that
    worktree (O9: recovery took a writer's for stale mid-commit; the commit was made but
    reported failed), the main checkout's to a git in the main checkout, a ref's to a git anywhere.
    Asking only where it matters keeps a busy worktree from pinning every stale lock."""
    relative = lock.relative_to(common)
    if relative.parts[0] == "worktrees" and len(relative.parts) == 3:
        own = linked.get(relative.parts[1])
        return (common,) if own is None else (common, own)
    if len(relative.parts) == 1 and relative.name in ("index.lock", "HEAD.lock"):
        return main
    return everywhere


def _checkouts(common: Path) -> dict[str, Path]:
    """Each linked worktree's record name and folder (from its ``gitdir`` pointer)."""
    found: dict[str, Path] = {}
    for record in _listing(common / "worktrees"):
        try:
            pointer = (common / "worktrees" / record / "gitdir").read_text(encoding="utf-8", errors="surrogateescape")
        except OSError:
            continue
        found[record] = Path(pointer.strip()).parent
    return found

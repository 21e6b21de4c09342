"""Who holds a memory repository's lock: the owner record beside it and the line a waiter says (V7).

The record (``reverie-merge.owner.json`` in the git common directory) is written by every holder
that keeps the lock longer than a status read (:mod:`orchestrator.memfs.locks`): its pid, when it
took the lock, a token that lets only that holder delete it, and what the hold is for (``source``:
a reflection merge, a turn's memory sync, an undo). A waiter reads it only after a try without
waiting failed, so a free lock costs nothing; a record whose process is gone says nothing.

The agent's own ``git`` holds the lock through the wrapper (``memfs/gitwrap.py``), a ``/bin/sh``
script that cannot rename atomically nor write JSON without another process: during a commit it
names itself in a file of its own, ``reverie-git.<its pid>.holder`` (:data:`WRAPPER_HOLDER`),
holding the pid of the reverie process that ran the command and the conversation (its own pid is
a sandbox's PID namespace's, meaningless outside), removed when git ends. Only the lock's holder
writes one, so at most one is live; a waiter finding no owner record reads it.

The same line is said by the post-turn sync (V5) and by the agent's own ``git`` through the wrapper
(``memfs/gitwrap.py``, whose stdlib-only copy of :func:`waiting_line` must say it identically);
the REPL picks it out of a tool's output by :data:`WAIT_LINE_PREFIX`. The wrapper is told which
process ran the command (:data:`PROCESS_ENV`) so a hold of that same process is waited for silently.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass
from pathlib import Path

from orchestrator.base.processes import pid_alive
from orchestrator.memfs.names import OWNER_FILE_NAME

__all__ = [
    "PROCESS_ENV",
    "WAIT_LINE_PREFIX",
    "WRAPPER_HOLDER",
    "LockHolder",
    "current_source",
    "drop_dead_wrappers",
    "drop_owner",
    "holder_of",
    "holding_as",
    "waited_in",
    "waiting_line",
    "write_owner",
]

PROCESS_ENV = "REVERIE_PROCESS"
"""The pid of the reverie process whose bash tool runs the command, for the git wrapper."""
WAIT_LINE_PREFIX = "reverie: memory is locked by another process"
WRAPPER_HOLDER = "reverie-git.{pid}.holder"
"""The git wrapper's name for itself while it commits, in the git common directory."""

_source: ContextVar[str] = ContextVar("reverie_lock_source", default="reverie")


@dataclass(frozen=True)
class LockHolder:
    """The process the owner record names and what its hold is for ("" when it does not say); for
    a committing git wrapper, the reverie process that ran it (0 when it was not told)."""

    pid: int
    source: str = ""


@contextmanager
def holding_as(source: str) -> Iterator[None]:
    """Name the repository-lock holds of this task (and the tasks it starts) ``source`` in the
    owner record: the code that takes the lock (merge-back) need not know why it was called."""
    token = _source.set(source)
    try:
        yield
    finally:
        _source.reset(token)


def current_source() -> str:
    """What the enclosing :func:`holding_as` names this task's holds (``reverie`` outside one)."""
    return _source.get()


def write_owner(common: Path, token: str, source: str | None = None) -> None:
    """Write this process's record (blocking; atomic, so a waiter never reads half of one)."""
    owner = common / OWNER_FILE_NAME
    record = {"pid": os.getpid(), "started": time.time(), "token": token, "source": source or _source.get()}
    tmp = owner.with_name(f"{owner.name}.{token}.tmp")
    try:
        tmp.write_text(json.dumps(record), encoding="utf-8")
        os.replace(tmp, owner)
    except OSError:
        # A full disk: the record is for diagnostics only, but no half-written file stays behind.
        tmp.unlink(missing_ok=True)
        raise


def drop_owner(common: Path, token: str) -> None:
    """Delete the record if it is still the one written with ``token`` (blocking)."""
    owner = common / OWNER_FILE_NAME
    try:
        record = json.loads(owner.read_text(encoding="utf-8"))
        if record.get("token") == token:
            owner.unlink()
    except (OSError, ValueError, AttributeError):
        pass


def holder_of(common: Path) -> LockHolder | None:
    """The holder the owner record (or else a committing wrapper's file) names, or None when there
    is none, it is unreadable or its process is gone (blocking; a read, or a listing when only a
    wrapper may hold it)."""
    try:
        record = json.loads((common / OWNER_FILE_NAME).read_text(encoding="utf-8"))
        pid = int(record["pid"])
        source = record.get("source")
    except FileNotFoundError:
        return _wrapper_holder(common)
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        return None
    if pid <= 0 or not pid_alive(pid):
        return _wrapper_holder(common)
    return LockHolder(pid, source if isinstance(source, str) else "")


def _wrapper_files(common: Path) -> Iterator[tuple[str, LockHolder]]:
    head, _, tail = WRAPPER_HOLDER.partition("{pid}")
    try:
        names = [entry.name for entry in os.scandir(common) if entry.name.startswith(head) and entry.name.endswith(tail)]
    except OSError:
        return
    for name in names:
        try:
            number, _, source = (common / name).read_text(encoding="utf-8").strip().partition(" ")
        except (OSError, UnicodeDecodeError):
            continue
        if number.isdigit():
            yield name, LockHolder(int(number), source)


def drop_dead_wrappers(common: Path) -> None:
    """Delete the files of committing wrappers whose reverie process is gone (blocking; start-up
    recovery): a wrapper killed mid-commit leaves its file behind."""
    for name, holder in _wrapper_files(common):
        if holder.pid > 0 and not pid_alive(holder.pid):
            (common / name).unlink(missing_ok=True)


def _wrapper_holder(common: Path) -> LockHolder | None:
    for _, holder in _wrapper_files(common):
        if holder.pid == 0 or pid_alive(holder.pid):
            return holder
    return None


def waiting_line(holder: LockHolder | None) -> str:
    """The one line a waiter says before it waits: the holder named when the record knows it."""
    about: list[str] = []
    if holder is not None and holder.pid > 0:
        about.append(f"pid {holder.pid}")
    if holder is not None and holder.source:
        about.append(holder.source)
    return f"{WAIT_LINE_PREFIX} ({', '.join(about)}); waiting" if about else f"{WAIT_LINE_PREFIX}; waiting"


def waited_in(output: str) -> str | None:
    """What a session says after a tool call whose output carries a wait line (the first one), or
    None: the model read it in the result, the person is told once in a line of its own (V7)."""
    for line in output.splitlines():
        if line.startswith(WAIT_LINE_PREFIX):
            about = line[len(WAIT_LINE_PREFIX) :].removesuffix("; waiting").strip()
            held = f"held by another process {about}" if about else "held by another process"
            return f"the agent's git command waited for this agent's memory repository lock, {held}"
    return None

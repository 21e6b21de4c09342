"""Process facts shared by the store (turns left running), the locks and start-up recovery, and
the one way reverie ends a whole process tree it owns (``kill_session``)."""

from __future__ import annotations

import os
import re
import select
import signal
import time
from pathlib import Path

__all__ = ["hide_secrets_from_proc", "kill_session", "pid_alive", "session_members"]


def pid_alive(pid: int | None) -> bool:
    """Whether a process with this id exists on this host (a process we may not signal counts)."""
    if pid is None or pid <= 0:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


_SECRET_NAME = re.compile(rb"API_?KEY|SECRET|TOKEN|PASSWORD", re.IGNORECASE)


def hide_secrets_from_proc() -> tuple[str, ...]:
    """Blank the values of secret-looking variables (``OPENAI_API_KEY``, ``*_TOKEN``, ...) in the
    environment block this process was started with; their names, for a test to check.

    ``/proc/<pid>/environ`` shows that block to every process of the same user, so a command the
    bash tool runs unconfined (``sandbox = off``) could read reverie's key from its parent
    (A6). ``os.environ`` keeps its own copy, so reverie and the children it gives an
    environment explicitly (git, the SDK's key, batch workers) are unaffected; a child started
    without one inherits the blanked values. Why not re-exec with a clean environment: one more
    interpreter start on every command, for the same effect. The block is rewritten through
    ``/proc/self/mem`` (no ``ctypes`` import at start-up, ~0.1 ms). Linux only (its bounds come from
    ``/proc/self/stat``); elsewhere, or when they cannot be read, nothing is done.
    """
    try:
        fields = Path("/proc/self/stat").read_bytes().rsplit(b")", 1)[1].split()
        start, end = int(fields[47]), int(fields[48])
    except (OSError, IndexError, ValueError):
        return ()
    if not 0 < start < end:
        return ()
    try:
        with open("/proc/self/mem", "r+b", buffering=0) as mem:
            mem.seek(start)
            block = mem.read(end - start)
            hidden: list[str] = []
            offset = 0
            for entry in block.split(b"\0"):
                name, eq, value = entry.partition(b"=")
                if eq and value and _SECRET_NAME.search(name):
                    mem.seek(start + offset + len(name) + 1)
                    mem.write(b"*" * len(value))
                    hidden.append(name.decode("utf-8", "replace"))
                offset += len(entry) + 1
    except OSError:
        return ()
    return tuple(hidden)


def _stat_fields(pid: str) -> list[str] | None:
    """``/proc/<pid>/stat`` after the command name (state, ppid, pgrp, session, ...); None when gone."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return None


def session_members(sid: int) -> list[int]:
    """The live processes (zombies left out: they are dead, waiting for a parent to reap them) of
    session ``sid``, read from ``/proc``; ``[]`` where there is no ``/proc``. Blocking."""
    try:
        entries = os.listdir("/proc")
    except OSError:
        return []
    found: list[int] = []
    for entry in entries:
        if not entry.isdigit():
            continue
        fields = _stat_fields(entry)
        if fields is not None and len(fields) > 3 and fields[3] == str(sid) and fields[0] not in ("Z", "X"):
            found.append(int(entry))
    return found


_KILL_ROUNDS = 50


def kill_session(sid: int, *, timeout: float = 10.0) -> list[int]:
    """SIGKILL every process of session ``sid`` and wait until none is left alive (at most
    ``timeout`` seconds, ``_KILL_ROUNDS`` scans); the ids it found alive there. Blocking: run it off the
    event loop. Raises ``ValueError`` for the caller's own session.

    Why a session, found through ``/proc``: a worker (a batch worker process, a stress child) is
    started as the leader of a session of its own, and everything it starts stays in that session
    unless it calls ``setsid`` itself (the bash tool runs commands in their own process group of the
    worker's session, bubblewrap makes no session of its own; see ``orchestrator.tools.bash``). The
    session id survives what the other marks do not: a process whose parent died is re-parented
    to init (so a walk of the parent links from the worker misses it), and a command's own process
    group is not the worker's (so ``killpg`` of the worker's misses it). Why not a cgroup: it needs
    a delegated cgroup tree, which a user's shell, a container or CI rarely gives. Why not
    ``PR_SET_PDEATHSIG`` alone: it is set by the child after it starts, so a parent killed in
    between leaves the child running, and a command run unconfined sets none.

    Each round signals the members it finds through a pidfd (so a pid reused meanwhile is never
    hit) and waits on those pidfds until the processes have exited; a member forked before its
    parent died is found by the next round. The session id cannot name a stranger's session while
    any process of ours is in it (the kernel keeps an id in use as long as a process carries it as
    its session), and after that only once the pid space has wrapped around.
    """
    if sid == os.getsid(0):
        raise ValueError(f"kill_session({sid}): that is this process's own session")
    deadline = time.monotonic() + timeout
    signalled: list[int] = []
    for _ in range(_KILL_ROUNDS):
        members = session_members(sid)
        if not members:
            break
        pidfds = [fd for fd in (_signal(pid, sid) for pid in members) if fd is not None]
        signalled.extend(members)
        try:
            _wait_exited(pidfds, deadline)
        finally:
            for fd in pidfds:
                os.close(fd)
        if time.monotonic() >= deadline:
            break
    return signalled


def _signal(pid: int, sid: int) -> int | None:
    """SIGKILL ``pid`` if it is still in session ``sid``; its pidfd to wait on (None when gone, or
    where pidfds do not exist: then it is signalled by pid)."""
    try:
        fd = os.pidfd_open(pid)
    except ProcessLookupError:
        return None
    except (AttributeError, OSError):
        _kill_pid(pid)
        return None
    fields = _stat_fields(str(pid))
    if fields is None or len(fields) <= 3 or fields[3] != str(sid):
        os.close(fd)
        return None
    try:
        signal.pidfd_send_signal(fd, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass
    return fd


def _kill_pid(pid: int) -> None:
    try:
        os.kill(pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass


def _wait_exited(pidfds: list[int], deadline: float) -> None:
    """Until every pidfd reports its process exited, or the deadline."""
    poller = select.poll()
    for fd in pidfds:
        poller.register(fd, select.POLLIN)
    pending = len(pidfds)
    while pending:
        left = deadline - time.monotonic()
        if left <= 0:
            return
        ready = poller.poll(left * 1000)
        for fd, _ in ready:
            poller.unregister(fd)
            pending -= 1

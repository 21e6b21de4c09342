"""Process facts shared by the store (turns left running), the locks and start-up recovery."""

from __future__ import annotations

import os
import re
from pathlib import Path

__all__ = ["hide_secrets_from_proc", "pid_alive"]


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
    (issue 23 item 6). ``os.environ`` keeps its own copy, so reverie and the children it gives an
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

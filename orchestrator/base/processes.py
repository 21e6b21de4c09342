"""Process facts shared by the store (turns left running), the locks and start-up recovery."""

from __future__ import annotations

import os

__all__ = ["pid_alive"]


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

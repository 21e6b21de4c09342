"""The one fault hook for crash tests (S29): die or pause at a named step of real code.

A crash test sets ``REVERIE_FAULT`` in a child process's environment and watches the child die
at a known moment of the real code path, then checks what start-up recovery makes of the
leftovers. One variable, one spelling, one action per prefix:

* ``REVERIE_FAULT=<step>``: the process kills itself with ``SIGKILL`` when it reaches ``<step>``
  (no ``finally``, no ``atexit``, no flush: what a power cut or the OOM killer leaves behind);
* ``REVERIE_FAULT=pause:<step>``: it waits there instead, for ``REVERIE_FAULT_PAUSE_SECONDS``
  (default 3600), cancellably, so a test can act while the step is in progress (async steps only;
  a synchronous step never sleeps: that would stall a worker thread without a way to cancel it).

Several steps may be armed at once, comma-separated. The steps (each documented where it fires):

========================================  =====================================================
``locked``                                merge-back holds the repository lock, nothing done
``before-rebase``                         merge-back wrote its pre-rebase pin, rebase not started
``between-rebase-and-ff``                 branch rebased in its worktree, parent untouched
``after-ff``                              parent fast-forwarded, pins and worktree not cleaned
``store.append.before_in_context``        a message row written, its context entry not yet
``stress.commit.staged``                  a stress writer's edit is on disk, not committed
``stress.commit.made``                    a stress writer's commit exists, its id not reported
``stress.lock.held``                      a stress lock holder holds the lock and ``index.lock``
========================================  =====================================================

Why ``SIGKILL`` for every step (the store's hook used to call ``os._exit(91)``): ``os._exit`` still
closes descriptors in an orderly way and returns a chosen status, which is kinder than the crashes
recovery must survive; one action means one meaning of "killed at a step".
"""

from __future__ import annotations

import os
import signal
from typing import Final

from anyio import sleep

__all__ = ["FAULT_ENV", "FAULT_STEPS", "PAUSE_ENV", "fault_point", "fault_point_sync", "kill_env"]

FAULT_ENV: Final = "REVERIE_FAULT"
PAUSE_ENV: Final = "REVERIE_FAULT_PAUSE_SECONDS"
FAULT_STEPS: Final = (
    "locked",
    "before-rebase",
    "between-rebase-and-ff",
    "after-ff",
    "store.append.before_in_context",
    "stress.commit.staged",
    "stress.commit.made",
    "stress.lock.held",
)


def _armed() -> tuple[str, ...]:
    raw = os.environ.get(FAULT_ENV)
    if not raw:
        return ()  # the steps sit on every turn's path (the store's appends): no split when none is armed
    return tuple(part.strip() for part in raw.split(",") if part.strip())


def _die() -> None:
    os.kill(os.getpid(), signal.SIGKILL)


def fault_point_sync(step: str) -> None:
    """Die here if ``REVERIE_FAULT`` names ``step`` (a ``pause:`` for it is ignored, see above)."""
    if step in _armed():
        _die()


async def fault_point(step: str) -> None:
    """Die or pause here if ``REVERIE_FAULT`` names ``step``; the pause is cancellable."""
    armed = _armed()
    if step in armed:
        _die()
    if f"pause:{step}" in armed:
        await sleep(float(os.environ.get(PAUSE_ENV, "3600")))


def kill_env(step: str, base: dict[str, str] | None = None) -> dict[str, str]:
    """An environment (``base`` or this process's) that kills a child at ``step``."""
    if step not in FAULT_STEPS:
        raise ValueError(f"unknown fault step {step!r}; known: {', '.join(FAULT_STEPS)}")
    return {**(os.environ if base is None else base), FAULT_ENV: step}

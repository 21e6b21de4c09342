"""The one fault hook for crash tests (S29): die or pause at a named step of real code.

A crash test sets ``REVERIE_FAULT=<step>`` (the process kills itself with ``SIGKILL`` there: what a
power cut leaves behind) or ``REVERIE_FAULT=pause:<step>`` (it waits there, cancellably, async steps
only) in a child's environment, then checks what start-up recovery makes of the leftovers. Several
steps may be armed at once, comma-separated. ``SIGKILL`` for every step, because ``os._exit`` is
kinder than the crashes recovery must survive. The steps are listed in docs/architecture.md,
"Fault steps", and documented where each fires."""

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

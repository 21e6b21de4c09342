"""Running a command's async main on the chosen backend, with Ctrl-C reported as one thing."""

from __future__ import annotations

import os
from collections.abc import Awaitable, Callable
from typing import TypeVar

import anyio

from orchestrator.cli import collector
from orchestrator.cli.errors import UserError, interrupted

__all__ = ["run_async"]

T = TypeVar("T")


def run_async(fn: Callable[[], Awaitable[T]], *, starting: bool = False) -> T:
    """Run on trio (the default) or ``REVERIE_BACKEND=asyncio``.

    Ctrl-C inside a task group arrives wrapped in an exception group; it is unwrapped to a plain
    ``KeyboardInterrupt`` so every command ends the same way (exit 130, no traceback).

    Everything alive before the loop (modules, classes, functions: most of the heap) is frozen out
    of the cyclic garbage collector first (``gc.freeze``, a constant-time move): a long session or a
    batch of many would otherwise re-scan it at every full collection (perf at 64 batch tasks:
    7% of all CPU in the collector, 3% after). ``starting=True`` leaves that, and the collector the
    console script paused, to ``fn``, whose start-up goes on inside the loop (``cli/collector.py``).
    """
    backend = os.environ.get("REVERIE_BACKEND", "trio")
    if backend not in {"trio", "asyncio"}:
        raise UserError(f"REVERIE_BACKEND={backend!r}: use trio or asyncio")
    if not starting:
        collector.resume()
    try:
        return anyio.run(fn, backend=backend)
    except BaseExceptionGroup as group:
        if interrupted(group):
            raise KeyboardInterrupt from None
        raise

"""The cyclic garbage collector during a command's start-up: paused, then everything start-up built
frozen out of it at once.

What a command builds before its real work starts (modules, classes, functions, the SDK's pydantic
models, the session's objects) lives until the process ends, so every collection during start-up
scans a growing heap and frees next to nothing (``bench/README.md``, "the collector at
start-up", has the count). The console
script (``cli/app.py``'s ``entry``) pauses the collector; :func:`resume` moves what is alive into the
permanent generation (``gc.freeze``, constant time) and turns collection back on, so a long session
or a batch never re-scans start-up's heap either. A command resumes it when its start-up is over:
``run_async`` before the event loop starts, except where the command says later. A headless chat
waits for the model's first answer (``cli/chat_headless.py``): the SDK is imported and its client
built on the way to the first request. Only a process that paused the collector itself has it
re-enabled: a caller of ``main()`` inside its own Python process keeps its own setting.
"""

from __future__ import annotations

import gc

__all__ = ["pause", "resume"]

_paused = False


def pause() -> None:
    """Stop cyclic collection until :func:`resume` (the console script, first thing)."""
    global _paused
    if gc.isenabled():
        gc.disable()
        _paused = True


def resume() -> None:
    """Start-up is over: freeze what exists and collect again if :func:`pause` stopped it. Idempotent."""
    global _paused
    gc.freeze()
    if _paused:
        _paused = False
        gc.enable()

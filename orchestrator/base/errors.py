"""The root of every error reverie raises on purpose, and the rule for which ones reach the user.

A ``ReverieError`` is a failure someone outside the code can act on: a bad setting, a damaged
repository, an unreachable model, a flag out of range. Its ``str()`` is one line naming the thing and,
where there is one, the fix; the CLI prints exactly that line. Anything that is not a ``ReverieError``
is a bug and the CLI shows its traceback, so a mistake in reverie is never dressed up as the user's.

Each layer raises its own subclass and translates the outside system's failures at its seam, so the
exception a caller catches names the layer that failed. The whole tree, with the module of each class,
is drawn in docs/architecture.md, "The error tree" (``tests/base/test_errors.py`` checks the drawing)."""

from __future__ import annotations

__all__ = ["ReverieError", "UsageError", "error_line"]


class ReverieError(Exception):
    """An expected failure with a one-line message for whoever can fix it; the CLI prints ``str()``."""


class UsageError(ReverieError, ValueError):
    """Arguments that contradict each other or fall outside their range, named as the user wrote them
    (``--writers must be at least 1, got 0``); a ``ValueError`` too, as these were before the root."""


def error_line(exc: BaseException, limit: int = 300) -> str:
    """``Type: message`` on one line, at most ``limit`` characters: how a contained failure (one a
    subagent records instead of raising) is written into its record and its event."""
    text = " ".join(str(exc).split()) or type(exc).__name__
    return f"{type(exc).__name__}: {text}"[:limit]

"""Which exceptions are the user's to fix, and how they are reported.

The rule (tree in docs/architecture.md, "The error tree"): a ``ReverieError`` is reported as its one line, a
damaged conversation store found mid-query among them (the store translates SQLite's errors into
``StoreDamaged``, naming its file, at its seam, so the CLI never looks at the driver's). Any
other exception is a bug and keeps its traceback, ``ValueError`` and ``OSError`` included: the CLI
checks the paths the user names where it takes them (``memory validate DIR``, ``run SUITE``, ``events
RUN_DIR``, ``stress --workdir``) and the seams translate their own OS errors (the store's directory).
"""

from __future__ import annotations

import os
import shutil
import sys
from pathlib import Path
from typing import NoReturn

from orchestrator.base.errors import ReverieError

__all__ = ["USER_ERRORS", "UserError", "describe", "fail", "interrupted", "program", "user_error_in"]


class UserError(ReverieError):
    """A mistake in the command line or its inputs; the message is the whole report."""


USER_ERRORS: tuple[type[BaseException], ...] = (ReverieError,)


def describe(exc: BaseException) -> str:
    """The one line for a user error."""
    return str(exc) or type(exc).__name__


def fail(message: str, code: int = 1) -> NoReturn:
    name = program()
    if name != "reverie":
        message = message.replace("`reverie ", f"`{name} ")  # a hint must run as printed
    first, *_ = (message.strip() or "failed").splitlines() or ["failed"]
    rest = message.strip().splitlines()[1:]
    print(f"reverie: error: {first}", file=sys.stderr)
    for line in rest:
        print(line, file=sys.stderr)
    raise SystemExit(code)


def program(argv0: str | None = None) -> str:
    """How to run this reverie again from the user's shell: ``reverie`` when that name on ``PATH`` is
    the program running now (or reverie was started another way, ``python -m``), else the path it was
    started as (``.venv/bin/reverie`` from a shell that has not activated the venv), so a printed
    command runs as written."""
    ran = Path(argv0 if argv0 is not None else sys.argv[0])
    if ran.name != "reverie" or not ran.exists():
        return "reverie"
    found = shutil.which("reverie")
    if found is not None and Path(found).resolve() == ran.resolve():
        return "reverie"
    relative = os.path.relpath(ran)
    return relative if len(relative) < len(str(ran.absolute())) and not relative.startswith("..") else str(ran.absolute())


def interrupted(exc: BaseException) -> bool:
    """True for Ctrl-C, also when a task group wrapped the ``KeyboardInterrupt`` in a group."""
    if isinstance(exc, KeyboardInterrupt):
        return True
    if isinstance(exc, BaseExceptionGroup):
        return any(interrupted(inner) for inner in exc.exceptions)
    return False


def user_error_in(exc: BaseException) -> BaseException | None:
    """The user's mistake inside ``exc``, looking through task-group exception groups."""
    if isinstance(exc, BaseExceptionGroup):
        for inner in exc.exceptions:
            found = user_error_in(inner)
            if found is not None:
                return found
        return None
    return exc if isinstance(exc, USER_ERRORS) else None

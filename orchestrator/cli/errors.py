"""Which exceptions are the user's to fix, and how they are reported."""

from __future__ import annotations

import sqlite3
import sys
from typing import NoReturn

from orchestrator.base.config import ConfigError
from orchestrator.memfs.gitsnapshot import GitReadError
from orchestrator.memfs.repo import GitError, MemoryCommitRejected
from orchestrator.models.types import ModelError
from orchestrator.store.records import StoreError

__all__ = ["USER_ERRORS", "UserError", "describe", "fail", "interrupted", "user_error_in"]


class UserError(Exception):
    """A mistake in the command line or its inputs; the message is the whole report."""


USER_ERRORS: tuple[type[BaseException], ...] = (
    UserError,
    ConfigError,
    GitError,
    GitReadError,
    MemoryCommitRejected,
    ModelError,
    StoreError,
    OSError,
    ValueError,
    sqlite3.DatabaseError,
)


def describe(exc: BaseException) -> str:
    """The report for a user error; an OS error reads ``path: reason`` rather than ``[Errno N] ...``."""
    if isinstance(exc, sqlite3.DatabaseError):
        from orchestrator.base.paths import store_path

        return f"conversation store {store_path()}: {exc}"
    if isinstance(exc, OSError) and exc.strerror:
        where = exc.filename if exc.filename is not None else None
        return f"{where}: {exc.strerror}" if where is not None else exc.strerror
    return str(exc) or type(exc).__name__


def fail(message: str, code: int = 1) -> NoReturn:
    first, *_ = (message.strip() or "failed").splitlines() or ["failed"]
    rest = message.strip().splitlines()[1:]
    print(f"reverie: error: {first}", file=sys.stderr)
    for line in rest:
        print(line, file=sys.stderr)
    raise SystemExit(code)


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

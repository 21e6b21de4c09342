"""Which exceptions are the user's to fix, and how they are reported."""

from __future__ import annotations

import sys
from typing import NoReturn

from orchestrator.config import ConfigError
from orchestrator.memfs.repo import GitError, MemoryCommitRejected
from orchestrator.models.types import ModelError
from orchestrator.store.records import StoreError

__all__ = ["USER_ERRORS", "UserError", "fail", "user_error_in"]


class UserError(Exception):
    """A mistake in the command line or its inputs; the message is the whole report."""


USER_ERRORS: tuple[type[BaseException], ...] = (
    UserError,
    ConfigError,
    GitError,
    MemoryCommitRejected,
    ModelError,
    StoreError,
    FileNotFoundError,
    PermissionError,
    NotADirectoryError,
    ValueError,
)


def fail(message: str, code: int = 1) -> NoReturn:
    first, *_ = (message.strip() or "failed").splitlines() or ["failed"]
    rest = message.strip().splitlines()[1:]
    print(f"reverie: error: {first}", file=sys.stderr)
    for line in rest:
        print(line, file=sys.stderr)
    raise SystemExit(code)


def user_error_in(exc: BaseException) -> BaseException | None:
    """The user's mistake inside ``exc``, looking through task-group exception groups."""
    if isinstance(exc, BaseExceptionGroup):
        for inner in exc.exceptions:
            found = user_error_in(inner)
            if found is not None:
                return found
        return None
    return exc if isinstance(exc, USER_ERRORS) else None

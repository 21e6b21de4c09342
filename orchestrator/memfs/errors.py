"""The memory layer's error root: every failure of the memory repository or of git under it.

Callers above memfs catch ``MemfsError`` to mean "the memory repository could not do it"; which git
command or check failed is in the subclass and its one-line message (tree in
docs/architecture.md, "The error tree").
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from orchestrator.base.errors import ReverieError

__all__ = ["GitError", "MemfsError"]


class MemfsError(ReverieError):
    """The memory repository (or git working on it) refused or failed; ``str()`` is one line."""


class GitError(MemfsError, RuntimeError):
    """A git command (or an in-process git operation) failed.

    ``str()`` is one line: ``git <command> failed in <dir> (<code>): <git's first error line>``.
    ``git_args``, ``returncode`` and ``stderr`` (everything git said) let callers classify it.
    """

    def __init__(self, args: Sequence[str], returncode: int, stderr: str, cwd: Path | str | None = None) -> None:
        self.git_args = tuple(args)
        self.returncode = returncode
        self.stderr = stderr
        self.cwd = None if cwd is None else Path(cwd)
        where = f" in {cwd}" if cwd is not None else ""
        super().__init__(f"git {' '.join(self.git_args[:3])} failed{where} ({returncode}): {_first_error(stderr)}")


def _first_error(said: str) -> str:
    lines = [line.strip() for line in said.splitlines() if line.strip()]
    errors = [line for line in lines if line.startswith(("error:", "fatal:"))]
    if errors:
        return errors[0]
    return lines[0] if lines else "no output"

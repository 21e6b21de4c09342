"""The memory layer's error root: every failure of the memory repository or of git under it.

Callers above memfs catch ``MemfsError`` to mean "the memory repository could not do it"; which git
command or check failed is in the subclass and its one-line message (tree in
``orchestrator.base.errors``).
"""

from __future__ import annotations

from orchestrator.base.errors import ReverieError

__all__ = ["MemfsError"]


class MemfsError(ReverieError):
    """The memory repository (or git working on it) refused or failed; ``str()`` is one line."""

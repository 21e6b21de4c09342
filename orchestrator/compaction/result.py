"""What one compaction did (``CompactionResult``), in the policy layer so that the runtime's plugin
interface (``orchestrator.runtime.plugins.SessionCompactor``), the session, the library and the CLI
can all name it without importing the subagent that produces it (D9)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

__all__ = ["CompactionResult"]


@dataclass(frozen=True)
class CompactionResult:
    """One compaction as applied (or skipped); what the CLI prints and tests inspect.

    ``status``: ``done`` (summary applied), ``failed`` (emergency eviction applied after every
    summarizer rung failed), ``skipped`` (nothing to evict, or, with ``error`` saying so, a summary
    that would not have made the context smaller) or ``error`` (nothing changed; ``error`` says why). ``evicted`` is ``k`` of the summary text (S4).
    """

    status: Literal["done", "failed", "skipped", "error"]
    trigger: str
    mode: str
    evicted: int
    tokens_before: int
    tokens_after: int
    messages_before: int
    messages_after: int
    summary: str = ""
    summary_message_id: str | None = None
    background: bool = False
    error: str | None = None

    @property
    def changed(self) -> bool:
        return self.status in ("done", "failed")

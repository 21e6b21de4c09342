"""Identifier retention (C6, S22): the exact strings a summary must not lose.

Summaries that paraphrase a path or drop a ticket id are the silent loss letta-code never checked
(W6). What counts as an identifier is ``orchestrator.base.identifiers`` (one extractor, shared with
the scripted model's summaries); this module measures what a summary kept of them.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from orchestrator.base.identifiers import extract_identifiers

__all__ = ["Retention", "extract_identifiers", "missing_identifiers", "retention"]


def missing_identifiers(identifiers: Iterable[str], summary: str) -> tuple[str, ...]:
    """Those not present verbatim in ``summary`` (a shortened hash counts as missing)."""
    return tuple(i for i in identifiers if i not in summary)


@dataclass(frozen=True)
class Retention:
    """``ratio`` is found / present, 1.0 when the evicted text held no identifier."""

    present: tuple[str, ...]
    missing: tuple[str, ...]

    @property
    def ratio(self) -> float:
        if not self.present:
            return 1.0
        return (len(self.present) - len(self.missing)) / len(self.present)


def retention(evicted_text: str, summary: str) -> Retention:
    present = extract_identifiers(evicted_text)
    return Retention(present, missing_identifiers(present, summary))

"""Validating the combination a merge-back is about to make ``HEAD`` (O8).

Two edits that are each valid can combine into a tree that breaks the repository's limits
(``.memfs.config.json``: core memory size, file size, depth): two branches that each add 400
characters of core memory under a 600-character budget. A per-commit check never sees that; the
letta-code reference validates the merged ``HEAD`` after every sync and starts a repair worker.

Here the candidate tip (the branch rebased onto ``HEAD``, or reconciled by the resolver) is
validated *as a whole* before the fast-forward: a fast-forward makes ``HEAD`` exactly that
commit, so this is the validation of the new ``HEAD`` without a moment in which an invalid
``HEAD`` is visible to a turn, a compiler or another merge. A failing candidate is told apart:

* ``invalid``: the branch's own tip (before the rebase) already fails; the branch is wrong alone;
* ``invalid-combined``: the branch alone is valid, its combination with ``HEAD`` is not.

Either way merge-back keeps the branch (nothing fast-forwarded, nothing lost). Chosen for the
``resolve`` policy: the resolver reconciles *conflicts*; it is not asked to shrink memory to fit
the limits, because that means choosing what to forget, which D3's rules leave to the agent (the
kept branch's reminder) or the user (``reverie reflections merge``). So under every policy a
breaking combination is kept, never merged over the limits.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Final, Literal

__all__ = [
    "REASON_INVALID",
    "REASON_INVALID_COMBINED",
    "CombinedVerdict",
    "judge_combination",
]

REASON_INVALID: Final = "the merged memory fails validation"
REASON_INVALID_COMBINED: Final = (
    "the branch is valid alone but breaks the memory limits combined with newer changes"
)


@dataclass(frozen=True)
class CombinedVerdict:
    """The verdict on a candidate ``HEAD``: no errors, or the errors and which kind of invalid."""

    errors: tuple[str, ...]
    reason_code: Literal["invalid", "invalid-combined"] | None = None

    @property
    def ok(self) -> bool:
        return not self.errors

    @property
    def reason(self) -> str | None:
        if self.reason_code is None:
            return None
        return REASON_INVALID_COMBINED if self.reason_code == "invalid-combined" else REASON_INVALID


async def judge_combination(
    audit: Callable[[Path, str, str | None], Awaitable[tuple[str, ...]]],
    checkout: Path,
    *,
    head: str,
    tip: str,
    own_tip: str,
) -> CombinedVerdict:
    """Validate ``tip`` (what ``HEAD`` becomes) as a whole with ``audit``; blame the combination or
    the branch.

    ``own_tip`` is the branch before it was rebased onto ``head``; when it is ``tip`` itself there
    was nothing to combine, and a failure is the branch's own. The branch alone is judged against
    its own parent, as its commits were when they were made.
    """
    errors = tuple(await audit(checkout, tip, head))
    if not errors:
        return CombinedVerdict(())
    if own_tip != tip and not await audit(checkout, own_tip, None):
        return CombinedVerdict(errors, "invalid-combined")
    return CombinedVerdict(errors, "invalid")

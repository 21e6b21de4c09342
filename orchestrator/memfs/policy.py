"""Layout policies and the policy file that steers the hook (MEMFS-4.2).

The file keeps the reference's name and place (``<git common dir>/letta-memory-layout-policy``, the
policy name plus LF) so repositories stay interchangeable with letta-code (MEMFS-R4.3).
"""

from __future__ import annotations

from typing import Final, Literal, cast

from orchestrator.base.errors import UsageError

__all__ = [
    "APPROVAL_ENV",
    "APPROVAL_ENV_ALIAS",
    "AGENT_APPROVAL",
    "NEEDS_APPROVAL",
    "LEGACY_ONLY",
    "POLICIES",
    "POLICY_FILE_NAME",
    "ROOT_MARKER",
    "SHARED_MEMORY",
    "LayoutPolicy",
    "parse_policy",
    "policy_file_text",
]

# Set to 1, either approves a commit that changes the constraints file: read by the validator, and
# passed on by the hook (which is written at every start, so they live here, not with the rules).
APPROVAL_ENV: Final = "REVERIE_MEMORY_CONSTRAINTS_UPDATE"
APPROVAL_ENV_ALIAS: Final = "LETTA_MEMORY_CONSTRAINTS_UPDATE"
NEEDS_APPROVAL: Final = ".memfs.config.json is protected and requires human approval to change"
"""The reference's error line for a config change without the approval (M7)."""
AGENT_APPROVAL: Final = "an approval counts only from the user's own shell, never from the agent's commands"
"""Why an approval variable set in the agent's bash command was not honoured (``memfs.protection``)."""

LayoutPolicy = Literal["legacy-only", "root-marker", "shared-memory"]

LEGACY_ONLY: Final[LayoutPolicy] = "legacy-only"
ROOT_MARKER: Final[LayoutPolicy] = "root-marker"
SHARED_MEMORY: Final[LayoutPolicy] = "shared-memory"
POLICIES: Final[tuple[LayoutPolicy, ...]] = (LEGACY_ONLY, ROOT_MARKER, SHARED_MEMORY)
POLICY_FILE_NAME: Final = "letta-memory-layout-policy"


def parse_policy(text: str | None) -> LayoutPolicy:
    """The policy a file's text selects; missing, unreadable or unknown content means legacy.

    The reference's shell hook compares the text without its final LF and its validator trims it;
    both treat anything that is not one of the three names like ``legacy-only``.
    """
    if text is None:
        return LEGACY_ONLY
    name = text.strip()
    return cast(LayoutPolicy, name) if name in POLICIES else LEGACY_ONLY


def policy_file_text(policy: LayoutPolicy | str) -> str:
    """What the installer writes: the name and one LF."""
    if policy not in POLICIES:
        raise UsageError(f"unknown layout policy {policy!r} (expected one of {', '.join(POLICIES)})")
    return f"{policy}\n"

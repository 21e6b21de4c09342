"""The names reverie gives what it keeps in a memory repository's git folder.

They live apart from the code that uses them (merge-back, worktrees, the merge lock) so a cheap
check such as :func:`orchestrator.memfs.tidy.nothing_to_recover` can read them without importing
that code before a chat's first request (P1).
"""

from __future__ import annotations

from typing import Final

__all__ = [
    "ACCEPTED_FILE",
    "APPROVALS_FILE",
    "BRANCH_PREFIX",
    "COMMIT_FAILED_FILE_NAME",
    "DISPLACED_REF_PREFIX",
    "LOCK_FILE_NAME",
    "OWNER_FILE_NAME",
    "PRE_REBASE_REF_PREFIX",
    "REVERIE_FOLDER",
    "WORKTREE_LOCK_FILE_NAME",
]

BRANCH_PREFIX: Final = "reverie/"
"""Every branch a subagent's worktree commits on: ``reverie/<kind>/<id>``."""
PRE_REBASE_REF_PREFIX: Final = "refs/reverie/pre-rebase/"
"""Merge-back pins a branch's tip here before rebasing it, so a crash mid-rebase loses nothing."""
DISPLACED_REF_PREFIX: Final = "refs/reverie/displaced/"
"""What a subagent left on the parent's branch, kept when reverie puts the branch back (``memfs.parent``)."""
LOCK_FILE_NAME: Final = "reverie-merge.lock"
OWNER_FILE_NAME: Final = "reverie-merge.owner.json"
WORKTREE_LOCK_FILE_NAME: Final = "reverie-worktrees.lock"
COMMIT_FAILED_FILE_NAME: Final = "reverie-commit-failed.json"
"""The git wrapper's record of the agent's last failed commit (``memfs.gitwrap``)."""
REVERIE_FOLDER: Final = "reverie"
"""Reverie's own folder in the git common directory (the git wrapper's ``bin``, the records below);
the bash tool's sandbox mounts it read-only (``tools/sandbox.py``)."""
ACCEPTED_FILE: Final = f"{REVERIE_FOLDER}/accepted-revision"
"""The last commit the audit before the model accepted (``memfs.protection``)."""
APPROVALS_FILE: Final = f"{REVERIE_FOLDER}/config-approvals"
"""The ``.memfs.config.json`` changes a user approved from their own shell (``memfs.protection``)."""

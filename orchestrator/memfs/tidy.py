"""Whether a memory repository needs start-up recovery, answered from its git folder alone.

Every chat start and every batch task asks this before its first request; the answer is almost
always "nothing to do", so it lives apart from :mod:`orchestrator.memfs.recovery` (worktrees,
merge-back, the merge lock), which is imported only when there is something to reconcile.
"""

from __future__ import annotations

import os
from pathlib import Path

from orchestrator.memfs.git import GitRepo
from orchestrator.memfs.indexlock import git_lock_files
from orchestrator.memfs.names import BRANCH_PREFIX, OWNER_FILE_NAME, PRE_REBASE_REF_PREFIX

__all__ = ["nothing_to_recover"]


def nothing_to_recover(repo_dir: Path) -> bool:
    """True when :func:`recover` would find nothing to do in ``repo_dir``: no lock owner record, no
    lock file git left behind, no linked worktree (nor a record of one), no ``reverie/*`` branch and no pre-rebase
    pin. One in-process look instead of recovery's dozen steps under the merge lock, for the common
    case of a new or tidy repository (every task of a batch run starts with one). Blocking; False
    when in doubt (not a repository top level)."""
    with GitRepo(repo_dir).open() as local:
        if local is None:
            return False
        common = local.common_dir
        if (common / OWNER_FILE_NAME).exists() or git_lock_files(common):
            return False
        try:
            if os.listdir(common / "worktrees"):
                return False
        except FileNotFoundError:
            pass
        return not local.refs(f"refs/heads/{BRANCH_PREFIX}") and not local.refs(PRE_REBASE_REF_PREFIX)

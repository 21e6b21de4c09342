"""A memory repository and its ``origin`` remote: how far ahead of its upstream it is, push, and
``pull --rebase`` (TURN-4.2). The post-turn sync decides when to call these and retries
them on transient errors; the git command lines, the network timeout and the error type are here
and in the git seam, so no layer above memfs builds them.
"""

from __future__ import annotations

from pathlib import Path

from orchestrator.memfs.git import GitRepo
from orchestrator.memfs.gitprocess import NETWORK_TIMEOUT

__all__ = ["ahead_of_upstream", "pull_rebase", "push_head"]


def ahead_of_upstream(repo: Path) -> int | None:
    """Commits on ``HEAD`` that its upstream does not have (``git rev-list --left-right --count
    HEAD...@{u}``'s left count); None when there is no upstream to compare with. Local only."""
    said = GitRepo(repo).run("rev-list", "--left-right", "--count", "HEAD...@{u}", check=False)
    if not said.ok:
        return None
    return int(said.stdout.split()[0])


def push_head(repo: Path) -> None:
    """``git push -u origin HEAD`` (the network timeout). :class:`~orchestrator.memfs.errors.GitError`
    when it fails, git's words in ``stderr`` (a rejected non-fast-forward push among them)."""
    GitRepo(repo).run("push", "-u", "origin", "HEAD", git_timeout=NETWORK_TIMEOUT)


def pull_rebase(repo: Path) -> None:
    """``git pull --rebase`` (the network timeout); :class:`~orchestrator.memfs.errors.GitError` when it
    fails, the checkout then possibly mid-rebase (the caller reads the status)."""
    GitRepo(repo).run("pull", "--rebase", git_timeout=NETWORK_TIMEOUT)

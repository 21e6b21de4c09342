"""The git directory's own files, read where libgit2 cannot or need not answer: whether a folder
holds a repository at all, which branch a checkout has (mid-rebase too), and what is left of a
repository whose ``HEAD`` is damaged or whose branch is gone (its reflogs, whether it has any
history). Part of the git seam (``docs/architecture.md``): no module outside it reads ``.git``.
"""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Final

from orchestrator.memfs.errors import GitError

__all__ = [
    "check_head",
    "checked_out",
    "has_history",
    "head_branch",
    "head_ref",
    "is_main_checkout",
    "is_repository",
    "reflog_tips",
]

_HEAD: Final = re.compile(r"^(ref: refs/\S+|[0-9a-f]{40}|[0-9a-f]{64})\s*$")


def is_repository(directory: Path) -> bool:
    """Whether ``directory`` has a ``.git`` (a folder, or a linked worktree's pointer file): the
    one "is there a repository here" check; whether git can use it is the guard's question."""
    return (directory / ".git").exists()


def is_main_checkout(directory: Path) -> bool:
    """Whether ``directory`` is a repository's main checkout (its ``.git`` a folder), not a linked
    worktree (whose ``.git`` is a file pointing into the main one's ``worktrees/``)."""
    return (directory / ".git").is_dir()


def check_head(path: Path) -> None:
    """A damaged ``.git/HEAD`` is named as such, with the fix (:class:`GitError`), instead of
    surfacing later as "not a git repository" from whichever git command meets it first."""
    head = path / ".git" / "HEAD"
    try:
        text = head.read_text(encoding="utf-8", errors="replace")
    except (FileNotFoundError, NotADirectoryError, IsADirectoryError):
        return
    if not _HEAD.match(text):
        raise GitError(
            ("init",), 1,
            f"fatal: {head} is damaged ({text.strip()[:40]!r} is neither a ref nor a commit id); "
            f"restore it with: git -C {path} symbolic-ref HEAD refs/heads/main",
        )


def head_ref(path: Path) -> str:
    """The full ref name ``path``'s ``HEAD`` points at (``refs/heads/main``), or ``"HEAD"`` when it
    is detached or unreadable; read from the file, so a branch that is gone is still named."""
    try:
        head = (path / ".git" / "HEAD").read_text(encoding="utf-8").strip()
    except OSError:
        head = ""
    return head.removeprefix("ref:").strip() if head.startswith("ref:") else "HEAD"


def head_branch(git_dir: Path) -> str | None:
    """The branch (short name) the ``HEAD`` file of ``git_dir`` names; None when detached or unreadable."""
    try:
        text = (git_dir / "HEAD").read_text(encoding="utf-8", errors="surrogateescape").strip()
    except OSError:
        return None
    return text[len("ref: refs/heads/") :] if text.startswith("ref: refs/heads/") else None


def checked_out(git_dir: Path) -> str | None:
    """The branch a checkout has: its ``HEAD``'s, or, mid-rebase (``HEAD`` detached), the branch
    being rebased, which git counts as checked out there too (``worktree add`` refuses it)."""
    branch = head_branch(git_dir)
    if branch is not None:
        return branch
    for state in ("rebase-merge", "rebase-apply"):
        try:
            name = (git_dir / state / "head-name").read_text(encoding="utf-8", errors="surrogateescape").strip()
        except OSError:
            continue
        if name.startswith("refs/heads/"):
            return name[len("refs/heads/") :]
    return None


def reflog_tips(path: Path, ref: str) -> list[str]:
    """The commits the reflogs of ``ref`` and of ``HEAD`` moved to, newest first."""
    git_dir = path / ".git"
    tips: list[str] = []
    for log in dict.fromkeys((git_dir / "logs" / ref, git_dir / "logs" / "HEAD")):
        try:
            lines = log.read_text(encoding="utf-8", errors="replace").splitlines()
        except OSError:
            continue
        for line in reversed(lines):
            parts = line.split(" ", 2)
            if len(parts) >= 2 and len(parts[1]) == 40 and parts[1].strip("0"):
                tips.append(parts[1])
    return list(dict.fromkeys(tips))


def has_history(path: Path) -> bool:
    """Anything at all beyond what ``git init`` writes: objects, refs, reflogs, or files beside ``.git``."""
    git_dir = path / ".git"
    if any(entry.name != ".git" for entry in path.iterdir()):
        return True
    objects = git_dir / "objects"
    if any(len(d.name) == 2 and any(d.iterdir()) for d in objects.iterdir() if d.is_dir()):
        return True
    if any((objects / "pack").glob("*.pack")) or (git_dir / "logs").exists():
        return True
    packed = git_dir / "packed-refs"
    if packed.exists() and any(not line.startswith("#") for line in packed.read_text(encoding="utf-8", errors="replace").splitlines()):
        return True
    return any(files for _, _, files in os.walk(git_dir / "refs"))

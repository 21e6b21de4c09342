"""What a stopped merge or rebase left in a checkout's index, for whoever resolves it (the resolver
subagent): the unmerged paths, each side's version of one, and marking one resolved. The git
command lines stay in memfs; the resolver decides what to write. Each verb runs git in a worker
thread as the harness (``GitRepo.arun``, ``memfs.git``), never raises for a path git does not know (it answers
"none" instead), and treats paths exactly as stored (M2).
"""

from __future__ import annotations

from pathlib import Path

from orchestrator.memfs.git import GitRepo

__all__ = ["mark_resolved", "side_of", "unmerged_paths"]


async def unmerged_paths(checkout: Path) -> tuple[str, ...]:
    """The paths still conflicted in ``checkout``'s index (``git diff --diff-filter=U``); empty when
    none is, or git cannot tell."""
    said = await GitRepo(checkout).arun("diff", "--name-only", "--diff-filter=U", "-z", check=False, harness=True)
    return tuple(path for path in said.stdout.split("\0") if path) if said.ok else ()


async def side_of(checkout: Path, stage: int, path: str) -> str | None:
    """The text of ``path`` at conflict ``stage`` (1 the common base, 2 ours, 3 theirs: ``git show
    :<stage>:<path>``); None when that side has no such file (deleted there)."""
    said = await GitRepo(checkout).arun("show", f":{stage}:{path}", check=False, harness=True)
    return said.stdout if said.ok else None


async def mark_resolved(checkout: Path, path: str) -> bool:
    """Stage ``path`` as it is now in the work tree (``git add``), which ends its conflict; False
    when git refused."""
    said = await GitRepo(checkout).arun("add", "--", path, check=False, harness=True)
    return said.ok

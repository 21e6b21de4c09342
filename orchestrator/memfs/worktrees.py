"""Git worktrees for background subagents (TURN-5.6, TURN-5.15; R1).

A subagent never touches the user's memory checkout: it works in its own linked worktree on a
branch ``reverie/<kind>/<id>`` (``kind`` is ``reflection`` for reflections). The id is
``<ts>-<id8>`` where ``ts`` is the UTC time as ISO-8601 basic format ``YYYYmmddTHHMMSSZ``
(e.g. ``20261009T154210Z-3f2a9c1d``): letta-code writes 14 bare digits, reverie adds ``T`` and
``Z`` so the time is unambiguous wherever the branch name is shown (T5). Ids in
letta-code's 14-digit form are still recognised when listing.

Everything goes through the git seam in a worker thread, never on the event loop. Listing
branches and worktrees, resolving the base, adding (branch and checkout), removing and pruning a
worktree are done in-process (libgit2, and the worktree records git keeps under ``<common
dir>/worktrees``, which libgit2 and git share); no hook runs, as with git and reverie's bypassed
hooks (S21).
"""

from __future__ import annotations

import re
import secrets
import shutil
from dataclasses import dataclass
from datetime import UTC, datetime
from functools import partial
from pathlib import Path

from anyio import CancelScope
from anyio import Path as AsyncPath

from orchestrator.base import blocking
from orchestrator.base.config import ConfigError
from orchestrator.base.errors import UsageError
from orchestrator.base.paths import check_agent_id, worktrees_root
from orchestrator.memfs.errors import GitError
from orchestrator.memfs.git import GitRepo
from orchestrator.memfs.locks import common_dir_sync, worktree_admin_lock
from orchestrator.memfs.names import BRANCH_PREFIX
from orchestrator.memfs.repopool import REPOS

__all__ = [
    "BRANCH_PREFIX",
    "ReflectionBranch",
    "Worktree",
    "branch_for",
    "create_worktree",
    "git_common_dir",
    "id_from_branch",
    "id_from_worktree_dir",
    "list_reflections",
    "new_worktree_id",
    "parse_worktree_list",
    "parse_worktree_records",
    "prune_worktrees",
    "remove_worktree",
    "worktree_records",
]

_ID = re.compile(r"^(?:\d{8}T\d{6}Z|\d{14})-[0-9a-f]{8}$")
_KIND = re.compile(r"^[a-z][a-z0-9-]{0,31}$")


@dataclass(frozen=True)
class Worktree:
    """A linked worktree owned by one subagent run."""

    path: Path
    branch: str
    base_revision: str
    id: str


@dataclass(frozen=True)
class ReflectionBranch:
    """A ``reverie/*`` branch as git sees it (the store may add records about it later)."""

    branch: str
    id: str
    tip: str
    ahead: int
    merged: bool
    worktree: Path | None


async def git_common_dir(repo_dir: Path) -> Path:
    """The git directory shared by a checkout and all its linked worktrees (absolute, resolved)."""
    return await blocking.run_sync("git", partial(common_dir_sync, Path(repo_dir)))


def new_worktree_id(now: datetime | None = None, token: str | None = None) -> str:
    """``YYYYmmddTHHMMSSZ-<8 hex>`` in UTC; ``token`` (8 hex digits) is random unless given."""
    moment = (now or datetime.now(UTC)).astimezone(UTC)
    suffix = token if token is not None else secrets.token_hex(4)
    if not re.fullmatch(r"[0-9a-f]{8}", suffix):
        raise UsageError(f"worktree id token must be 8 lowercase hex digits, got {suffix!r}")
    return f"{moment:%Y%m%dT%H%M%SZ}-{suffix}"


def branch_for(worktree_id: str, kind: str = "reflection") -> str:
    if not _KIND.match(kind):
        raise UsageError(f"invalid worktree kind {kind!r}: use lowercase letters, digits and '-'")
    if not _ID.match(worktree_id):
        raise UsageError(f"invalid worktree id {worktree_id!r}: expected YYYYmmddTHHMMSSZ-xxxxxxxx")
    return f"{BRANCH_PREFIX}{kind}/{worktree_id}"


def id_from_branch(branch: str) -> str | None:
    """The id of a ``reverie/<kind>/<id>`` branch (``refs/heads/`` optional), else None."""
    name = branch.removeprefix("refs/heads/")
    if not name.startswith(BRANCH_PREFIX):
        return None
    parts = name[len(BRANCH_PREFIX) :].split("/")
    if len(parts) != 2 or not _KIND.match(parts[0]) or not _ID.match(parts[1]):
        return None
    return parts[1]


async def create_worktree(
    repo_dir: Path,
    *,
    agent_id: str,
    revision: str = "HEAD",
    kind: str = "reflection",
    root: Path | None = None,
    worktree_id: str | None = None,
) -> Worktree:
    """Add ``{root}/{agent_id}/{kind}-{id}`` on a new branch at ``revision`` (read once).

    An unborn or missing revision is a :class:`GitError`.
    """
    check_agent_id(agent_id)
    wid = worktree_id or new_worktree_id()
    branch = branch_for(wid, kind)
    base = await blocking.run_sync("git", partial(_commit_of, Path(repo_dir), revision))
    base_dir = root or worktrees_root()
    path = base_dir / agent_id / f"{kind}-{wid}"
    try:
        await AsyncPath(path.parent).mkdir(parents=True, exist_ok=True)
    except (FileExistsError, NotADirectoryError, PermissionError) as exc:
        where = "the worktree root" if root is not None else "REVERIE_WORKTREES (or $REVERIE_HOME/worktrees)"
        raise ConfigError(
            f"cannot create subagent worktrees under {base_dir}: {exc.strerror or exc}; point {where} at a writable directory"
        ) from exc
    async with worktree_admin_lock(repo_dir):
        await blocking.run_sync("git", partial(_add_sync, Path(repo_dir), path, branch, base))
    return Worktree(path=path, branch=branch, base_revision=base, id=wid)


def _add_sync(repo_dir: Path, path: Path, branch: str, base: str) -> None:
    """In-process (libgit2) unless git would have to pick another record name (a stale record of
    the same name), which ``git worktree add`` does its own way."""
    with GitRepo(repo_dir).open() as local:
        if local is not None and not (local.common_dir / "worktrees" / path.name).exists():
            local.add_worktree(path, branch, base)
            return
    GitRepo(repo_dir).run("worktree", "add", "--quiet", "-b", branch, str(path), base, harness=True)


async def remove_worktree(repo_dir: Path, worktree: Worktree | Path, *, drop_branch: bool = False) -> None:
    """Force-remove the worktree directory and prune git's record of it; keep the branch unless
    ``drop_branch`` (a :class:`Worktree`'s branch, deleted as ``git branch -D`` deletes it: a
    throw-away worktree whose commits nobody merges).

    Shielded from cancellation so a cancelled run still cleans up. A directory that is already
    gone is fine (the prune forgets it), and so is a branch that is already gone.
    """
    path = worktree.path if isinstance(worktree, Worktree) else Path(worktree)
    branch = worktree.branch if drop_branch and isinstance(worktree, Worktree) else None
    with CancelScope(shield=True):
        async with worktree_admin_lock(repo_dir):
            await blocking.run_sync("git", partial(_remove_sync, Path(repo_dir), path, branch))


def _commit_of(repo_dir: Path, revision: str) -> str:
    with GitRepo(repo_dir).open() as local:
        found = None if local is None else local.resolve(revision)
    if found is None:
        raise GitError(("rev-parse", "--verify"), 128, f"fatal: {revision!r} names no commit", repo_dir)
    return found[0]


def _remove_sync(repo_dir: Path, path: Path, branch: str | None = None) -> None:
    """Delete one of the repository's linked worktrees and prune its record, in-process; anything
    else (not a linked worktree of this repository) is left to ``git worktree remove`` to refuse.
    Then ``branch``, if given, is deleted as ``git branch -D`` would, in-process too (a git process
    for every compaction, which runs on most turns of a long session, was about 3 ms of CPU): its
    worktree is gone, so no checkout holds it; one still checked out elsewhere is left alone."""
    with GitRepo(repo_dir).open() as local:
        if local is not None:
            linked = {record.resolve() for record, _ in local.worktrees()[1:]}
            if path.exists() and path.resolve() in linked:
                REPOS.discard(path)
                shutil.rmtree(path)
            elif path.exists():
                GitRepo(repo_dir).run("worktree", "remove", "--force", "--force", str(path), check=False, harness=True)
            local.prune_worktrees()
            if branch is not None:
                name = branch.removeprefix("refs/heads/")
                if name not in {held for _, held in local.worktrees()}:
                    local.delete_ref(f"refs/heads/{name}")
            return
    if path.exists():
        GitRepo(repo_dir).run("worktree", "remove", "--force", "--force", str(path), check=False, harness=True)
    GitRepo(repo_dir).run("worktree", "prune", check=False, harness=True)
    if branch is not None:
        GitRepo(repo_dir).run("branch", "-D", branch, check=False, harness=True)


async def worktree_records(repo_dir: Path) -> tuple[tuple[Path, str | None], ...]:
    """``git worktree list``: ``(path, branch or None)`` per worktree, the main checkout first."""
    return await blocking.run_sync("git", partial(_records_sync, Path(repo_dir)))


def _records_sync(repo_dir: Path) -> tuple[tuple[Path, str | None], ...]:
    with GitRepo(repo_dir).open() as local:
        if local is not None:
            return local.worktrees()
    listing = GitRepo(repo_dir).run("worktree", "list", "--porcelain", "-z", harness=True)
    return tuple(parse_worktree_records(listing.stdout))


async def prune_worktrees(repo_dir: Path) -> None:
    """``git worktree prune`` (in-process): forget worktrees whose folder is gone."""
    await blocking.run_sync("git", partial(_prune_sync, Path(repo_dir)))


def _prune_sync(repo_dir: Path) -> None:
    with GitRepo(repo_dir).open() as local:
        if local is not None:
            local.prune_worktrees()
            return
    GitRepo(repo_dir).run("worktree", "prune", harness=True)


def parse_worktree_records(porcelain_z: str) -> list[tuple[Path, str | None]]:
    """``(path, branch or None when detached)`` per worktree of ``git worktree list --porcelain -z``."""
    records: list[tuple[Path, str | None]] = []
    path: Path | None = None
    branch: str | None = None
    for field in [*porcelain_z.split("\0"), ""]:
        if field.startswith("worktree "):
            path, branch = Path(field[len("worktree ") :]), None
        elif field.startswith("branch "):
            branch = field[len("branch ") :].removeprefix("refs/heads/")
        elif field == "" and path is not None:
            records.append((path, branch))
            path = None
    return records


def parse_worktree_list(porcelain_z: str) -> dict[str, Path]:
    """Map branch name → worktree path from ``git worktree list --porcelain -z`` output."""
    return {branch: path for path, branch in parse_worktree_records(porcelain_z) if branch is not None}


def id_from_worktree_dir(path: Path) -> str | None:
    """The id in a ``{kind}-{id}`` worktree directory name, else None."""
    kind, sep, rest = path.name.partition("-")
    return rest if sep and _KIND.match(kind) and _ID.match(rest) else None


async def list_reflections(repo_dir: Path, kind: str | None = "reflection") -> tuple[ReflectionBranch, ...]:
    """Reverie's branches (of ``kind``, or all kinds when None) with their state, oldest id first."""
    pattern = f"refs/heads/{BRANCH_PREFIX}{kind}/" if kind else f"refs/heads/{BRANCH_PREFIX}"
    result = await blocking.run_sync("git", partial(_reflections_sync, Path(repo_dir), pattern))
    return tuple(sorted(result, key=lambda b: (b.id, b.branch)))


def _reflections_sync(repo_dir: Path, pattern: str) -> list[ReflectionBranch]:
    with GitRepo(repo_dir).open() as local:
        if local is None:
            raise GitError(("for-each-ref",), 128, "fatal: not the top level of a git repository", repo_dir)
        head = local.head()
        by_branch = {branch: path for path, branch in local.worktrees() if branch is not None}
        result: list[ReflectionBranch] = []
        for ref, tip in local.refs(pattern):
            name = ref.removeprefix("refs/heads/")
            wid = id_from_branch(name)
            if wid is None:
                continue
            merged = head is not None and local.is_ancestor(tip, head)
            ahead = 0 if merged or head is None else local.ahead(head, tip)
            result.append(
                ReflectionBranch(branch=name, id=wid, tip=tip, ahead=ahead, merged=merged, worktree=by_branch.get(name))
            )
        return result

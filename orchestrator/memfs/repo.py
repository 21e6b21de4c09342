"""Operations on an agent's memory repository: create it, commit to it, read its state.

Everything here is synchronous and blocking; async callers use ``orchestrator.base.blocking.run_sync``.
Questions (is it a repository, its ``HEAD``, its status) are answered in-process through the git
seam's libgit2 handle; only writes (init, add, commit) start git. Reverie's own commits run the
validator in-process and then commit with hooks bypassed (S21), so a harness commit
costs no interpreter start-up while a commit typed by hand in a shell is still guarded by the
installed hook.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from orchestrator.memfs.errors import GitError, MemfsError
from orchestrator.memfs.git import GitRepo
from orchestrator.memfs.gitdir import check_head, has_history, head_ref, is_repository, reflog_tips
from orchestrator.memfs.gittrees import MAX_TREE_DEPTH, MAX_TREE_PATHS, TreeTooLarge
from orchestrator.memfs.guard import Layout, RepositoryRefused, locate, report, require_checkout
from orchestrator.memfs.hook import install_hook
from orchestrator.memfs.indexlock import (
    clear_stale_git_locks,
)
from orchestrator.memfs.localrepo import LocalRepo
from orchestrator.memfs.names import COMMIT_FAILED_FILE_NAME
from orchestrator.memfs.provenance import Provenance, trailer_args

__all__ = [
    "DEFAULT_MEMORY_FILES",
    "INITIAL_COMMIT_MESSAGE",
    "CommitResult",
    "MemoryCommitRejected",
    "RepoStatus",
    "commit_memory",
    "harness_commit_all",
    "harness_commit_tracked",
    "harness_unstage",
    "harness_init",
    "pack",
    "head_revision",
    "init_memory_repo",
    "is_memory_repo",
    "index_corrupt",
    "missing_objects",
    "repair_index",
    "repo_status",
    "take_failed_commit",
]

INITIAL_COMMIT_MESSAGE = "chore: initialize local memory"

DEFAULT_MEMORY_FILES: Mapping[str, str] = {
    "MEMORY.md": (
        "# Memory\n"
        "\n"
        "This folder is your long-term memory. Root Markdown files are always in your context;\n"
        "folders with their own MEMORY.md hold details you open when you need them.\n"
    ),
    "persona.md": (
        "---\n"
        "name: persona\n"
        "description: Who I am, how I work, and the rules I follow when I answer\n"
        "---\n"
        "I am a helpful assistant with a persistent, git-backed memory.\n"
    ),
    "human.md": (
        "---\n"
        "name: human\n"
        "description: What I know about the person I work with\n"
        "---\n"
        "Nothing recorded yet.\n"
    ),
}

_NO_HOOKS = ("-c", "core.hooksPath=/dev/null")


class MemoryCommitRejected(MemfsError, RuntimeError):
    """The staged memory failed validation; ``report`` is the validator's report, verbatim."""

    def __init__(self, report: str, errors: Sequence[str]) -> None:
        super().__init__(report.rstrip())
        self.report = report
        self.errors = tuple(errors)


@dataclass(frozen=True)
class CommitResult:
    """The commit made and the files it changed."""

    revision: str
    files: tuple[str, ...]


@dataclass(frozen=True)
class RepoStatus:
    """The post-turn sync's view of a checkout (TURN-4.2)."""

    initialized: bool
    revision: str | None
    porcelain: tuple[str, ...]
    operation: str | None
    conflicted: tuple[str, ...]
    has_remote: bool

    @property
    def dirty(self) -> bool:
        return bool(self.porcelain)

    @property
    def in_conflict(self) -> bool:
        return self.operation is not None or bool(self.conflicted)


def is_memory_repo(path: Path) -> bool:
    """True when ``path`` is the top level of a git work tree."""
    if not path.is_dir():
        return False
    with GitRepo(path).open() as local:
        return local is not None


def head_revision(path: Path) -> str | None:
    """The commit ``HEAD`` of the repository at ``path`` names; None when unborn or no repository."""
    with GitRepo(path).open() as local:
        return None if local is None else local.head()


def init_memory_repo(
    path: Path,
    *,
    files: Mapping[str, str] | None = None,
    policy: str = "root-marker",
) -> str:
    """Create a v2 memory repository at ``path`` and return its HEAD.

    Idempotent: an existing repository with commits is left as it is (its hook is refreshed, as
    the reference reinstalls hooks on every harness operation). One whose branch is gone is
    restored from its reflog or refused (``_revive_branch``), never reinitialised: the default files
    are written only into an empty directory (or a bare ``git init``). A non-empty directory that
    is not a repository is refused rather than swallowed into memory.
    """
    if path.is_symlink() and not path.exists():
        raise GitError(
            ("init",), 1,
            f"fatal: {path}: is a symbolic link to {os.readlink(path)}, which does not exist; create that directory or remove the link",
        )
    if path.exists() and not path.is_dir():
        raise GitError(("init",), 1, f"fatal: {path}: exists and is not a directory")
    check_head(path)
    require_checkout(path)
    if is_memory_repo(path):
        install_hook(path, policy=policy)
        revision = head_revision(path) or _revive_branch(path)
        if revision is not None:
            return revision
    elif is_repository(path):
        said = GitRepo(path).run("rev-parse", "--show-toplevel", check=False).stderr.strip()
        raise GitError(("rev-parse",), 1, f"fatal: {path}: the memory repository is damaged: {said.splitlines()[-1] if said else 'not a git top level'}")
    elif path.exists() and any(path.iterdir()):
        raise GitError(("init",), 1, f"fatal: {path}: directory is not empty and is not a git repository")
    path.mkdir(parents=True, exist_ok=True)
    GitRepo(path).run("init", "-q", "-b", "main")
    _ensure_identity(path)
    install_hook(path, policy=policy)
    contents = dict(DEFAULT_MEMORY_FILES if files is None else files)
    for rel, text in contents.items():
        target = path / rel
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(text, encoding="utf-8")
    return commit_memory(path, INITIAL_COMMIT_MESSAGE, allow_empty=True, provenance=Provenance("init")).revision


def _revive_branch(path: Path) -> str | None:
    """A repository whose ``HEAD`` names no commit (A3): its branch put back at the
    newest commit its reflog (or ``HEAD``'s) names, with a warning; None when the repository holds
    nothing at all (a bare ``git init``: the defaults go in); :class:`RepositoryRefused` in one line,
    naming the fix, when it has history the reflog cannot restore. Never reinitialised: a deleted
    ref (``git update-ref -d``, a crash) would otherwise replace memory with the default files."""
    branch = head_ref(path)
    with GitRepo(path).open() as local:
        found = None if local is None else next((c for c in reflog_tips(path, branch) if _is_commit(local, c)), None)
    if found is not None:
        GitRepo(path).run("update-ref", branch, found, "", harness=True)
        report(path, f"{path}: {branch} was missing; restored it from the reflog at {found[:7]} (memory was not reinitialised)", restored=True)
        return found
    if not has_history(path):
        return None
    raise RepositoryRefused(
        f"{path}: the memory repository has history but no {branch}; reverie will not reinitialise it: find the last "
        f"commit with `git -C {path} reflog` or `git -C {path} fsck --lost-found` and restore it with "
        f"`git -C {path} update-ref {branch} <commit>`"
    )


def _is_commit(local: LocalRepo, oid: str) -> bool:
    found = local.read(oid)
    return found is not None and found[0] == "commit"


def _ensure_identity(path: Path) -> None:
    """A machine without a git identity (a fresh CI box) could not commit memory at all, neither the
    harness nor the agent's own ``git commit``; give the repository a local one in that case only."""
    for key, value in (("user.name", "reverie"), ("user.email", "reverie@localhost")):
        if GitRepo(path).run("config", "--get", key, check=False).returncode != 0:
            GitRepo(path).run("config", key, value)


def commit_memory(
    path: Path,
    message: str,
    paths: Sequence[str] | None = None,
    *,
    allow_empty: bool = False,
    provenance: Provenance | None = None,
) -> CommitResult:
    """Stage ``paths`` (all changes when None), validate in-process, and commit, with
    ``provenance``'s trailers (H1; none: the caller's message is the whole message).

    Raises ``MemoryCommitRejected`` with the hook's report when the staged tree is invalid; the
    index is left as staged so the caller (or the agent) can fix and retry, nothing is discarded.
    """
    # deferred: the lock and the validator load with the first commit, not before a chat's first request
    from orchestrator.memfs.locks import merge_lock_sync

    with merge_lock_sync(path) as common:
        clear_stale_git_locks(common, path)
        repair_index(path)
        return _commit_locked(path, message, paths, allow_empty=allow_empty, provenance=provenance)


def _commit_locked(
    path: Path, message: str, paths: Sequence[str] | None, *, allow_empty: bool, provenance: Provenance | None = None
) -> CommitResult:
    """``commit_memory`` under the repository lock (D1)."""
    if paths is None:
        GitRepo(path).run("add", "-A", retry=True)
    elif paths:
        GitRepo(path).run("add", "-A", "--", *paths, retry=True)
    staged = GitRepo(path).run("diff", "--cached", "--name-only", "-z").stdout
    files = tuple(p for p in staged.split("\0") if p)
    if not files and not allow_empty:
        revision = head_revision(path)
        if revision is None:
            raise GitError(("commit",), 1, f"fatal: {path}: nothing to commit and no commits yet")
        return CommitResult(revision=revision, files=())
    # deferred: as in commit_memory
    from orchestrator.memfs.validator import format_report, validate_staged

    result = validate_staged(path)
    if not result.ok:
        raise MemoryCommitRejected(format_report(result), result.errors)
    args = [*_NO_HOOKS, "commit", "-q", "-m", message, *trailer_args(provenance or Provenance())]
    if allow_empty:
        args.append("--allow-empty")
    GitRepo(path).run(*args, retry=True)
    revision = head_revision(path)
    assert revision is not None
    return CommitResult(revision=revision, files=files)


def repo_status(path: Path, *, layout: Layout | None = None) -> RepoStatus:
    """State checks 1-3 of TURN-4.2 plus whether an ``origin`` remote exists. ``layout``:
    the caller's :func:`~orchestrator.memfs.guard.locate` of ``path``, just made (the post-turn
    check locates once for all its steps: each look is three file-system calls)."""
    if layout is None:
        if not is_repository(path):
            return RepoStatus(False, None, (), None, (), False)
        locate(path)
    with GitRepo(path).open() as local:
        if local is None:
            said = GitRepo(path).run("rev-parse", "--show-toplevel", check=False).stderr.strip()
            raise GitError(("status",), 128, said or f"fatal: {path}: not the top level of a git repository", path)
        entries = local.status()
        return RepoStatus(
            initialized=True,
            revision=local.head(),
            porcelain=tuple(f"{code} {name}" for code, name in entries),
            operation=local.operation(),
            conflicted=tuple(name for code, name in entries if "U" in code or code in {"AA", "DD"}),
            has_remote=local.has_remote(),
        )


def take_failed_commit(path: Path, *, layout: Layout | None = None) -> str | None:
    """The agent's last failed commit as one line (``git commit`` exit 128: fatal: ...), recorded by
    the git wrapper (``memfs.gitwrap``), and the record removed; None when there is none. Blocking.
    ``layout`` as :func:`repo_status` takes it."""
    layout = layout or locate(path)
    if layout is None:
        return None
    record = layout.common_dir / COMMIT_FAILED_FILE_NAME
    try:
        data = json.loads(record.read_text(encoding="utf-8"))
        record.unlink()
    except FileNotFoundError:
        return None
    except (OSError, ValueError):
        record.unlink(missing_ok=True)
        return None
    if not isinstance(data, dict):
        return None
    command, code, error = data.get("command"), data.get("code"), str(data.get("error", ""))
    return f"`git {command}` failed (exit {code}): {' '.join(error.split())[:300]}"


def pack(path: Path) -> None:
    """Every object in one pack and every ref in ``packed-refs`` (``git repack -a -d`` and ``git
    pack-refs --all``): a repository copied many times over (a batch run's template) then links two
    object files and needs no ``refs/heads`` folder until its first commit. Blocking."""
    GitRepo(path).run("repack", "-a", "-d", "-q", "-n", harness=True)
    GitRepo(path).run("pack-refs", "--all", harness=True)


# ---------------------------------------------------------------------------------------------
# Commits by the harness itself (its identity, hooks bypassed: reverie validated first, S21)
# ---------------------------------------------------------------------------------------------

_SHA_IN_SUMMARY = re.compile(r"^\[[^\n]* ([0-9a-f]{40})\]", re.MULTILINE)


async def harness_init(path: Path) -> None:
    """``git init -b main`` in the existing folder ``path``. :class:`GitError` when it fails."""
    await GitRepo(path).arun("init", "-q", "-b", "main", harness=True)


async def harness_commit_all(path: Path, message: str, *, provenance: Provenance | None = None) -> None:
    """Stage everything and commit it as the harness (the caller validated the files first), with
    ``provenance``'s trailers (H1). :class:`GitError` when git refuses."""
    git = GitRepo(path)
    await git.arun("add", "-A", harness=True)
    await git.arun("commit", "-q", "-m", message, *trailer_args(provenance or Provenance()), harness=True)


async def harness_commit_tracked(checkout: Path, message: str, *, provenance: Provenance | None = None) -> str:
    """``git commit -a`` as the harness; the new commit's id, read from git's own summary line (not
    from ``HEAD``, which another writer of the checkout may have moved since). :class:`GitError`
    when git refuses (a held ``index.lock`` among the reasons: the caller may retry)."""
    trailers = trailer_args(provenance or Provenance())
    said = await GitRepo(checkout).arun("-c", "core.abbrev=40", "commit", "-a", "-m", message, *trailers, harness=True)
    found = _SHA_IN_SUMMARY.search(said.stdout)
    if found is None:
        raise GitError(("commit",), 0, f"fatal: no commit id in git's summary: {said.stdout.strip()[:200]}", checkout)
    return found.group(1)


async def harness_unstage(checkout: Path, rel: str) -> None:
    """``git reset -q HEAD -- rel`` as the harness: ``rel``'s index entry back to ``HEAD``'s (after
    a commit that died before writing its index), lock contention retried; a failure is left be."""
    await GitRepo(checkout).arun("reset", "-q", "HEAD", "--", rel, check=False, harness=True, retry=True)


def index_corrupt(index: Path) -> bool:
    """Whether git would refuse ``index`` as corrupt: no ``DIRC`` header, an unknown version, a
    checksum that does not match (an all-zero one is git's ``index.skipHash``). A missing index is
    not corrupt (git makes one). Blocking: one ``stat``, and for a file not seen sound before, one
    read and a SHA-1 of a few kilobytes.

    The post-turn check and the bash tool's clean-up ask after every turn, and most turns leave the
    index as it was: a file that passed is not read again while its inode, size, modification and
    change times are the same. Git replaces the index by renaming a new file over it (a new inode);
    a write in place moves the change time, which no one can set back. A file changed less than
    ``_SETTLED_NS`` ago is not remembered, since a second write within the same tick of the clock
    that dates files could keep its times (git's "racy" index entries): the kernel's ticks every
    few milliseconds, and a file system that keeps whole seconds only gets two seconds."""
    try:
        st = os.stat(index)
    except FileNotFoundError:
        return False
    key = os.fspath(index)
    signature = (st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns)
    if _SOUND_INDEXES.get(key) == signature:
        return False
    try:
        data = index.read_bytes()
    except FileNotFoundError:
        return False
    if len(data) < 32 or data[:4] != b"DIRC" or int.from_bytes(data[4:8], "big") not in (2, 3, 4):
        return True
    tail = data[-20:]
    if tail != bytes(20) and hashlib.sha1(data[:-20]).digest() != tail:
        return True
    changed = max(st.st_mtime_ns, st.st_ctime_ns)
    settled = _SETTLED_NS if changed % 1_000_000_000 else _SETTLED_WHOLE_SECONDS_NS
    if time.time_ns() - changed > settled:
        if len(_SOUND_INDEXES) >= 1024:
            _SOUND_INDEXES.clear()
        _SOUND_INDEXES[key] = signature
    return False


_SOUND_INDEXES: dict[str, tuple[int, int, int, int, int]] = {}
_SETTLED_NS = 100_000_000
_SETTLED_WHOLE_SECONDS_NS = 2_000_000_000


def repair_index(path: Path, *, layout: Layout | None = None) -> bool:
    """Rebuild a corrupt index of the checkout at ``path`` from ``HEAD`` (A9), keeping
    the damaged file as ``index.corrupt`` beside it; True when it did. The working tree is not
    touched: what was staged and not committed stays in the files, unstaged. Blocking; call with
    the repository lock held. ``layout`` as :func:`repo_status` takes it."""
    layout = layout or locate(path)
    if layout is None or not index_corrupt(layout.git_dir / "index"):
        return False
    os.replace(layout.git_dir / "index", layout.git_dir / "index.corrupt")
    if head_revision(path) is None:
        GitRepo(path).run("read-tree", "--empty", harness=True)
    else:
        GitRepo(path).run("read-tree", "HEAD", harness=True)
    report(
        path,
        f"{path}: .git/index was corrupt and every commit failed; rebuilt it from HEAD (the damaged file is "
        "kept as index.corrupt; uncommitted edits stay in the files, unstaged)",
        restored=True,
    )
    return True


_MISSING: dict[tuple[str, str], tuple[str, ...]] = {}


def missing_objects(path: Path, revision: str) -> tuple[str, ...]:
    """The paths of ``revision``'s tree whose objects are missing from the repository (a tree's as
    ``dir/``), checked once per commit and process, each object once (at most ``MAX_TREE_PATHS``
    of them, ``MAX_TREE_DEPTH`` deep: a tree over the caps is the audit's to name). Blocking."""
    key = (str(path), revision)
    if key not in _MISSING:
        with GitRepo(path).open() as local:
            _MISSING[key] = () if local is None else _missing_in(local, revision)
    return _MISSING[key]


def _missing_in(local: LocalRepo, revision: str) -> tuple[str, ...]:
    found = local.read(revision)
    if found is None:
        return (f"commit {revision[:12]}",)
    resolved = local.resolve(revision)
    if resolved is None:
        return (f"the tree of {revision[:12]}",)
    missing: list[str] = []
    pending = [("", resolved[1], 0)]
    seen: set[str] = set()
    while pending and len(seen) < MAX_TREE_PATHS:
        prefix, tree, depth = pending.pop()
        if tree in seen:
            continue  # a subtree named twice is checked once: a tree of shared subtrees stays small
        seen.add(tree)
        if local.read(tree) is None:
            missing.append(prefix or "/")
            continue
        try:
            entries = local.tree_entries(tree)
        except TreeTooLarge:
            continue  # the audit names it
        for entry in entries:
            name, mode, oid = entry.path, entry.mode, entry.oid
            if mode == "40000":
                if depth < MAX_TREE_DEPTH:
                    pending.append((f"{prefix}{name}/", oid, depth + 1))
            elif mode != "160000" and oid not in seen:
                seen.add(oid)
                if local.read(oid) is None:
                    missing.append(f"{prefix}{name}")
    return tuple(sorted(missing))

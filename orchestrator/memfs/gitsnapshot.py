"""Read validation snapshots from git (blocking; callers thread it).

Why this module reads git objects without libgit2 although ``memfs.git`` is the one in-process
reader: the pre-commit hook (``memfs.hook``) imports it, and the hook is a new process for every
commit, the agent's own ``git commit`` included; pygit2's import (~60 ms) would be paid on each,
on top of the runner's (GitPython's, ~45 ms). So the staged snapshot (the hook's, and reverie's own
commits') is read with git processes through the seam's runner (``memfs.git.run``, its timeout, environment and ``GitError``): paths come
NUL-separated (``ls-files -z``, ``ls-tree -z``, ``diff -z``) and are used exactly as stored
(M2); blobs are read in one ``cat-file --batch`` process. A commit's snapshot (the M8
audit after every turn and before every merge) runs inside reverie, where libgit2 is loaded
anyway, so it is read in-process through the seam's ``LocalRepo``, names decoded from the raw
tree bytes (M2 again), and an audit starts no process. Git inherits the caller's environment, so
inside a hook ``GIT_INDEX_FILE`` (``git commit -a`` or ``git commit <paths>``) selects the index
git will commit.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from functools import partial
from pathlib import Path
from types import MappingProxyType

from orchestrator.memfs.git import GitError, GitResult, LocalRepo, open_repo, run
from orchestrator.memfs.policy import (
    LEGACY_ONLY,
    POLICY_FILE_NAME,
    ROOT_MARKER,
    SHARED_MEMORY,
    LayoutPolicy,
    parse_policy,
)
from orchestrator.memfs.snapshot import Entry, Snapshot, diff_status, path_order_key

__all__ = [
    "audit_policy",
    "git_common_dir",
    "read_commit_snapshot",
    "policy_in",
    "read_policy",
    "read_staged_snapshot",
    "read_staged_snapshot_local",
]

_EMPTY: dict[str, Entry] = {}


def _git(
    repo: Path, *args: str, stdin: bytes | None = None, check: bool = True, env: Mapping[str, str] | None = None
) -> GitResult:
    return run(repo, *args, input=stdin, check=check, env=env, inherit_location=True)


def _name(raw: bytes) -> str:
    return raw.decode("utf-8", "surrogateescape")


def git_common_dir(repo: Path) -> Path:
    """The common git directory (shared by linked worktrees)."""
    out = _git(repo, "rev-parse", "--git-common-dir").stdout.strip()
    return (repo / out).resolve()


def read_policy(repo: Path) -> LayoutPolicy:
    """The policy file of ``repo`` (missing or unreadable: legacy, as the hook treats it)."""
    try:
        common = git_common_dir(repo)
    except GitError:
        return LEGACY_ONLY
    return policy_in(common)


def policy_in(common_dir: Path) -> LayoutPolicy:
    """The policy file in the common git directory ``common_dir`` (missing or unreadable: legacy)."""
    try:
        text = (common_dir / POLICY_FILE_NAME).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError):
        return LEGACY_ONLY
    return parse_policy(text)


def _read_index(repo: Path, env: Mapping[str, str] | None = None) -> dict[str, Entry]:
    entries: dict[str, Entry] = {}
    for record in _git(repo, "ls-files", "-s", "-z", env=env).out.split(b"\0"):
        if not record:
            continue
        meta, _, path = record.partition(b"\t")
        mode, oid, _stage = meta.split(b" ")
        entries.setdefault(_name(path), Entry(mode.decode(), oid.decode()))
    return entries


def _read_tree(repo: Path, revision: str) -> dict[str, Entry] | None:
    """Entries of ``revision``'s tree, or None when it does not name a commit (unborn ``HEAD``)."""
    result = _git(repo, "ls-tree", "-r", "-z", "--full-tree", revision, "--", check=False)
    if result.returncode != 0:
        if _git(repo, "rev-parse", "-q", "--verify", f"{revision}^{{commit}}", check=False).returncode == 0:
            raise GitError(("ls-tree",), result.returncode, result.stderr, repo)
        return None
    entries: dict[str, Entry] = {}
    for record in result.out.split(b"\0"):
        if not record:
            continue
        meta, _, path = record.partition(b"\t")
        mode, _type, oid = meta.split(b" ")
        entries[_name(path)] = Entry(mode.decode(), oid.decode())
    return entries


def _read_changes(repo: Path, env: Mapping[str, str] | None = None) -> dict[str, str]:
    """``git diff --cached --name-status`` with git's own rename detection; renames under the new path."""
    fields = _git(repo, "diff", "--cached", "-z", "--name-status", "--no-ext-diff", env=env).out.split(b"\0")
    changes: dict[str, str] = {}
    i = 0
    while i < len(fields) and fields[i]:
        status = fields[i].decode()
        if status[:1] in ("R", "C"):
            changes[_name(fields[i + 2])] = status[:1]
            i += 3
        else:
            changes[_name(fields[i + 1])] = status[:1]
            i += 2
    return changes


def _read_blobs(repo: Path, oids: Iterable[str]) -> dict[str, bytes]:
    wanted = sorted(set(oids))
    if not wanted:
        return {}
    out = _git(repo, "cat-file", "--batch", stdin="".join(f"{oid}\n" for oid in wanted).encode()).out
    blobs: dict[str, bytes] = {}
    pos = 0
    for oid in wanted:
        eol = out.index(b"\n", pos)
        header = out[pos:eol].split(b" ")
        pos = eol + 1
        if len(header) != 3:
            continue
        size = int(header[2])
        blobs[oid] = out[pos : pos + size]
        pos += size + 1
    return blobs


def _needed_blobs(index: dict[str, Entry], head: dict[str, Entry] | None, changes: dict[str, str]) -> set[str]:
    wanted = {e.oid for p, e in index.items() if p.endswith(".md") or p == ".memfs.config.json"}
    accepted_config = (head or _EMPTY).get(".memfs.config.json")
    if accepted_config is not None:
        wanted.add(accepted_config.oid)  # an audit keeps the accepted protection in force
    for path in changes:
        entry = (head or _EMPTY).get(path)
        if entry is not None and path.endswith(".md"):
            wanted.add(entry.oid)
    return wanted - _gitlink_oids(index)


def _gitlink_oids(index: dict[str, Entry]) -> set[str]:
    return {e.oid for e in index.values() if e.mode == "160000"}


def _snapshot(
    index: dict[str, Entry],
    head: dict[str, Entry] | None,
    changes: dict[str, str],
    read_blobs: Callable[[Iterable[str]], dict[str, bytes]],
) -> Snapshot:
    ordered = {p: index[p] for p in sorted(index, key=path_order_key)}
    blobs = read_blobs(_needed_blobs(ordered, head, changes))
    blobs.update(dict.fromkeys(_gitlink_oids(ordered), b""))  # a submodule has no text to check
    return Snapshot(
        index=MappingProxyType(ordered),
        head=None if head is None else MappingProxyType(head),
        blobs=MappingProxyType(blobs),
        changes=MappingProxyType(changes),
    )


def read_staged_snapshot(repo: Path, index_file: str | None = None) -> Snapshot:
    """The index (``index_file``, default the one git's environment names), ``HEAD`` and the
    staged changes of ``repo``, with the blobs validation reads."""
    env = None if index_file is None else {"GIT_INDEX_FILE": index_file}
    index = _read_index(repo, env)
    head = _read_tree(repo, "HEAD")
    return _snapshot(index, head, _read_changes(repo, env), partial(_read_blobs, repo))


def read_staged_snapshot_local(local: LocalRepo, index_file: str | None = None) -> Snapshot:
    """:func:`read_staged_snapshot` through libgit2, with no git process: for a process that has
    libgit2 loaded already (the hook's service in reverie, ``memfs/hook_service.py``)."""
    entries, changes = local.staged(index_file)
    index = {path: Entry(mode, oid) for path, mode, oid in entries}
    return _snapshot(index, _local_tree(local, "HEAD"), changes, partial(_local_blobs, local))


def read_commit_snapshot(repo: Path, revision: str, base: str | None) -> Snapshot | None:
    """``revision``'s tree as the "index" and ``base`` (default its first parent) as accepted tree.

    None when ``revision`` names no commit (a repository without commits).
    """
    parent = base if base is not None else f"{revision}^"
    with open_repo(repo) as local:
        if local is not None:
            tree = _local_tree(local, revision)
            if tree is None:
                return None
            known = _local_tree(local, parent) or {}
            return _snapshot(tree, known, diff_status(tree, known), partial(_local_blobs, local))
    tree = _read_tree(repo, revision)
    if tree is None:
        return None
    accepted = _read_tree(repo, parent) or {}
    return _snapshot(tree, accepted, diff_status(tree, accepted), partial(_read_blobs, repo))


def _local_tree(local: LocalRepo, revision: str) -> dict[str, Entry] | None:
    resolved = local.resolve(revision)
    if resolved is None:
        return None
    return {path: Entry(mode, oid) for path, mode, oid in local.files(resolved[1])}


def _local_blobs(local: LocalRepo, oids: Iterable[str]) -> dict[str, bytes]:
    blobs: dict[str, bytes] = {}
    for oid in sorted(set(oids)):
        found = local.read(oid)
        if found is not None and found[0] == "blob":
            blobs[oid] = found[1]
    return blobs


def audit_policy(repo: Path, revision: str, marker_in_tree: bool) -> LayoutPolicy:
    """The audit's policy (MEMFS-1.5): the file's choice, refined by history for ``root-marker``."""
    with open_repo(repo) as local:
        common = local.common_dir if local is not None else None
        try:
            text: str | None = ((common or git_common_dir(repo)) / POLICY_FILE_NAME).read_text(encoding="utf-8").strip()
        except (OSError, UnicodeDecodeError, GitError):
            text = None
        if text in (LEGACY_ONLY, SHARED_MEMORY):
            return parse_policy(text)
        if text != ROOT_MARKER:
            return ROOT_MARKER if marker_in_tree else LEGACY_ONLY
        if local is not None:
            return ROOT_MARKER if marker_in_tree or local.ever_had(revision, "MEMORY.md") else LEGACY_ONLY
    touched = _git(repo, "log", "-1", "--format=%H", revision, "--", "MEMORY.md", check=False)
    return ROOT_MARKER if touched.returncode == 0 and touched.stdout.strip() else LEGACY_ONLY

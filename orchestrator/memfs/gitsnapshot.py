"""Read validation snapshots from git (blocking; callers thread it).

Why this module reads git objects without libgit2 although ``memfs.git`` is the one in-process
reader: the pre-commit hook (``memfs.hook``) imports it, and the hook is a new process for every
commit, the agent's own ``git commit`` included; pygit2's import (~60 ms) would be paid on each,
on top of the runner's (GitPython's, ~45 ms). So the staged snapshot (the hook's, and reverie's own
commits') is read with git processes through the seam's runner (``GitRepo.run``, its timeout, environment and ``GitError``): paths come
NUL-separated (``ls-files -z``, ``diff -z``) or from raw tree objects and are used exactly as
stored (M2); blobs are read in one ``cat-file --batch`` process, a tree one level per process,
counted against the caps of ``memfs.gittrees`` (a tree over one is never expanded). A commit's snapshot (the M8
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

from orchestrator.memfs.errors import GitError
from orchestrator.memfs.git import GitRepo
from orchestrator.memfs.gitprocess import GitResult
from orchestrator.memfs.gittrees import TreeCount, TreeTooLarge
from orchestrator.memfs.localrepo import LocalRepo
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
    return GitRepo(repo).run(*args, input=stdin, check=check, env=env, inherit_location=True)


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
    """Entries of ``revision``'s tree in ``git ls-tree -r`` order, or None when it names no tree
    (unborn ``HEAD``, a root commit's parent). Read a level at a time (one ``cat-file --batch`` per
    level, each shared subtree once) and counted as it goes, so a tree over the caps of
    ``memfs.gittrees`` raises :class:`~orchestrator.memfs.gittrees.TreeTooLarge` instead of expanding: ``ls-tree
    -r`` would print every path it stands for."""
    found = _git(repo, "rev-parse", "-q", "--verify", f"{revision}^{{tree}}", check=False)
    if found.returncode != 0:
        return None
    count = TreeCount(repo)
    entries: dict[str, Entry] = {}
    level = [("", found.stdout.strip(), 0)]
    while level:
        objects = _cat_file(repo, {oid for _, oid, _ in level})
        following: list[tuple[str, str, int]] = []
        for prefix, oid, depth in level:
            kind, data = objects.get(oid, ("missing", b""))
            if kind != "tree":
                raise GitError(("ls-tree",), 128, f"fatal: tree {oid} of {prefix or revision} is missing", repo)
            for mode, name, child in _tree_records(data, len(oid) // 2):
                path = f"{prefix}/{name}" if prefix else name
                count.add(path, depth + 1)
                if mode == "40000":
                    following.append((path, child, depth + 1))
                else:
                    entries[path] = Entry(mode.zfill(6), child)
        level = following
    return {path: entries[path] for path in sorted(entries, key=path_order_key)}


def _tree_records(data: bytes, oid_bytes: int) -> list[tuple[str, str, str]]:
    """``(mode, name, oid)`` of each entry of a raw tree object (``<mode> <name>\\0<binary id>``)."""
    records = []
    pos = 0
    while pos < len(data):
        space = data.index(b" ", pos)
        nul = data.index(b"\0", space)
        oid = data[nul + 1 : nul + 1 + oid_bytes].hex()
        records.append((data[pos:space].decode(), _name(data[space + 1 : nul]), oid))
        pos = nul + 1 + oid_bytes
    return records


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
    return {oid: data for oid, (_kind, data) in _cat_file(repo, oids).items()}


def _cat_file(repo: Path, oids: Iterable[str]) -> dict[str, tuple[str, bytes]]:
    """``(type, bytes)`` of each object that exists, in one ``cat-file --batch`` process."""
    wanted = sorted(set(oids))
    if not wanted:
        return {}
    out = _git(repo, "cat-file", "--batch", stdin="".join(f"{oid}\n" for oid in wanted).encode()).out
    found: dict[str, tuple[str, bytes]] = {}
    pos = 0
    for oid in wanted:
        eol = out.index(b"\n", pos)
        header = out[pos:eol].split(b" ")
        pos = eol + 1
        if len(header) != 3:
            continue
        size = int(header[2])
        found[oid] = (header[1].decode(), out[pos : pos + size])
        pos += size + 1
    return found


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
    try:
        head = _read_tree(repo, "HEAD")
    except TreeTooLarge:
        # the audit names such a HEAD; the index is judged on its own, as a first commit's is
        return _snapshot(index, None, diff_status(index, None), partial(_read_blobs, repo))
    return _snapshot(index, head, _read_changes(repo, env), partial(_read_blobs, repo))


def read_staged_snapshot_local(local: LocalRepo, index_file: str | None = None) -> Snapshot:
    """:func:`read_staged_snapshot` through libgit2, with no git process: for a process that has
    libgit2 loaded already (the hook's service in reverie, ``memfs/hook_service.py``)."""
    entries, changes = local.staged(index_file)
    index = {path: Entry(mode, oid) for path, mode, oid in entries}
    try:
        head = _local_tree(local, "HEAD")
    except TreeTooLarge:  # as read_staged_snapshot: the index judged on its own (``staged`` agrees)
        head = None
    return _snapshot(index, head, changes, partial(_local_blobs, local))


def read_commit_snapshot(repo: Path, revision: str, base: str | None) -> Snapshot | None:
    """``revision``'s tree as the "index" and ``base`` (default its first parent) as accepted tree.

    None when ``revision`` names no commit (a repository without commits).
    :class:`~orchestrator.memfs.gittrees.TreeTooLarge` when ``revision``'s tree is over a cap; an accepted
    tree over one is replaced by the tree itself (the tree judged on its own, no change-based rule).
    """
    parent = base if base is not None else f"{revision}^"
    with GitRepo(repo).open() as local:
        if local is not None:
            tree = _local_tree(local, revision)
            if tree is None:
                return None
            known = _accepted(partial(_local_tree, local, parent), tree)
            return _snapshot(tree, known, diff_status(tree, known), partial(_local_blobs, local))
    tree = _read_tree(repo, revision)
    if tree is None:
        return None
    accepted = _accepted(partial(_read_tree, repo, parent), tree)
    return _snapshot(tree, accepted, diff_status(tree, accepted), partial(_read_blobs, repo))


def _accepted(read: Callable[[], dict[str, Entry] | None], tree: dict[str, Entry]) -> dict[str, Entry]:
    try:
        return read() or {}
    except TreeTooLarge:
        return tree


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
    with GitRepo(repo).open() as local:
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

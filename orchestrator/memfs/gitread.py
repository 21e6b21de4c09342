"""The in-process reads of one repository through libgit2: objects, trees (bounded walks), refs and
reflogs, ``HEAD``, status, ancestry and worktree records, each answered as the git command it
replaces would (named in each method), with the caches the compiler reads every turn.

:class:`RepoReader` is the reading half of :class:`~orchestrator.memfs.localrepo.LocalRepo`, the one
libgit2 handle reverie holds per repository (``docs/architecture.md``, "The git seam").
"""

from __future__ import annotations

import contextlib
import functools
import os
import threading
from collections import OrderedDict
from collections.abc import Iterator
from pathlib import Path
from typing import Any, Final

from orchestrator.memfs.errors import GitError
from orchestrator.memfs.gitdir import checked_out, head_branch
from orchestrator.memfs.gittrees import TREE_MODE, Revision, TreeCount, TreeEntry, TreeTooLarge
from orchestrator.memfs.libgit import libgit2

__all__ = ["RepoReader", "path_bytes"]

_KIND_NAMES: Final = {1: "commit", 2: "tree", 3: "blob", 4: "tag"}


class RepoReader:
    """One repository (a main checkout or a linked worktree) opened in-process, for reading.

    libgit2 objects are not thread-safe: a handle is used by one thread at a time, which the pool
    guarantees by holding :attr:`lock`. Every libgit2 failure is re-raised as :class:`GitError`; a
    name that resolves to nothing is ``None``, not an error.

    The compiler reads every memory file on every turn, so parsed trees, ``<tree>:<name>``
    look-ups and small blobs are cached by object id (objects never change; a bounded LRU each).
    Refs and ``HEAD`` are always asked of libgit2, which re-reads them when their files change.
    """

    _TREE_CACHE_ENTRIES: Final = 20_000
    _LOOKUP_CACHE_SIZE: Final = 4_096
    _BLOB_CACHE_BYTES: Final = 2 * 1024 * 1024
    _BLOB_CACHE_MAX_BLOB: Final = 128 * 1024

    def __init__(self, handle: Any, top_level: Path) -> None:
        self._repo = handle
        self.top_level = top_level
        self.git_dir = Path(handle.path).resolve()
        self.lock = threading.Lock()
        self.evicted = False
        self._trees: OrderedDict[str, tuple[tuple[str, str, str], ...]] = OrderedDict()
        self._cached_tree_entries = 0
        self._lookups: OrderedDict[tuple[str, str], tuple[str, str] | None] = OrderedDict()
        self._verdicts: OrderedDict[str, TreeTooLarge | None] = OrderedDict()
        self._blobs: OrderedDict[str, bytes] = OrderedDict()
        self._cached_blob_bytes = 0

    @functools.cached_property
    def common_dir(self) -> Path:
        """The git directory shared by the main checkout and all linked worktrees (a git directory's
        ``commondir`` never changes: read once per handle)."""
        pointer = self.git_dir / "commondir"
        try:
            return (self.git_dir / pointer.read_text(encoding="utf-8").strip()).resolve()
        except FileNotFoundError:
            return self.git_dir

    def _fail(self, what: str, error: Exception) -> GitError:
        return GitError((what,), 128, f"fatal: {error}", self.top_level)

    def forget(self) -> None:
        """Drop the caches and libgit2's (when the pool lets the handle go): its open files and
        object cache are released now, not when the cycle collector reaches the handle."""
        self._trees.clear()
        self._lookups.clear()
        self._verdicts.clear()
        self._blobs.clear()
        self._cached_tree_entries = self._cached_blob_bytes = 0
        with contextlib.suppress(Exception):
            self._repo.free()

    def read(self, oid: str) -> tuple[str, bytes] | None:
        """(object type, raw bytes) of ``oid`` exactly as stored, or None when it is missing."""
        pygit2 = libgit2()
        try:
            kind, data = self._repo.odb.read(oid)
        except (KeyError, ValueError):
            return None
        except pygit2.GitError as error:
            raise self._fail("cat-file", error) from error
        return _KIND_NAMES.get(int(kind), "unknown"), bytes(data)

    def staged(self, index_file: str | None = None) -> tuple[tuple[tuple[str, str, str], ...], dict[str, str]]:
        """What ``git ls-files -s`` and ``git diff --cached --name-status`` (rename detection on, as
        git's default) say of the index ``index_file`` (default the repository's own): ``(path,
        mode, oid)`` of every entry, and ``{path: status letter}`` against ``HEAD``, a rename or copy
        under its new path. The pre-commit hook's service reads a commit's index this way, with no
        git process (``memfs/hook_service.py``)."""
        pygit2 = libgit2()
        try:
            if index_file:
                index = pygit2.Index(index_file)
            else:
                index = self._repo.index
                index.read()
            entries: dict[str, tuple[str, str, str]] = {}
            for entry in index:
                entries.setdefault(entry.path, (entry.path, f"{entry.mode:06o}", str(entry.id)))
            head = self.resolve("HEAD")
            if head is None or self.oversized(head[1]) is not None:
                # no HEAD, or one over a cap (diffing it would list all it expands to): all is new
                return tuple(entries.values()), dict.fromkeys(entries, "A")
            diff = self._repo[head[1]].diff_to_index(index)
            diff.find_similar()
        except (KeyError, ValueError, pygit2.GitError) as error:
            raise self._fail("diff --cached", error) from error
        changes: dict[str, str] = {}
        for delta in diff.deltas:
            letter = delta.status_char()
            path = delta.new_file.path if letter in ("R", "C", "A") else delta.old_file.path
            if {letter, changes.get(path)} == {"A", "D"}:
                letter = "T"  # libgit2 splits a type change (file <-> symlink) into a delete and an add
            changes[path] = letter
        return tuple(entries.values()), changes

    def resolve(self, revision: str = "HEAD") -> tuple[str, str] | None:
        """(commit, tree) that ``revision`` names, peeled to a commit; None when it names none."""
        pygit2 = libgit2()
        try:
            commit = self._repo.revparse_single(revision).peel(pygit2.Commit)
        except (KeyError, ValueError, pygit2.GitError):
            return None
        return str(commit.id), str(commit.tree_id)

    def revision(self, revision: str = "HEAD") -> Revision | None:
        """The commit ``revision`` names (peeled) and its tree, or None (no such commit, an unborn
        branch, a name with whitespace)."""
        if not revision or any(ch.isspace() for ch in revision):
            return None
        found = self.resolve(revision)
        return None if found is None else Revision(commit=found[0], tree=found[1])

    def _tree(self, tree_oid: str, count: TreeCount | None = None, path: str = "") -> tuple[tuple[str, str, str], ...]:
        """``(name, mode, oid)`` of each entry of ``tree_oid`` in stored order, cached. ``count``
        (the walk's; default a fresh one) is told the number of entries before any is parsed, so one
        tree object of millions of entries is refused as a whole (``path``: where it is)."""
        cached = self._trees.get(tree_oid)
        if cached is not None:
            self._trees.move_to_end(tree_oid)
            return cached
        pygit2 = libgit2()
        try:
            tree = self._repo[tree_oid]
            if not isinstance(tree, pygit2.Tree):
                raise KeyError(tree_oid)
            (count or TreeCount(self.top_level)).width(path, len(tree))
            parsed = tuple(
                (entry.raw_name.decode("utf-8", "surrogateescape"), f"{entry.filemode:o}", str(entry.id))
                for entry in tree
            )
        except (KeyError, ValueError, pygit2.GitError):
            raise GitError(("ls-tree",), 128, f"fatal: tree {tree_oid} is missing", self.top_level) from None
        if len(parsed) <= self._TREE_CACHE_ENTRIES // 4:
            self._trees[tree_oid] = parsed
            self._cached_tree_entries += len(parsed)
            while self._cached_tree_entries > self._TREE_CACHE_ENTRIES:
                _, dropped = self._trees.popitem(last=False)
                self._cached_tree_entries -= len(dropped)
        return parsed

    def tree_entries(self, tree_oid: str, prefix: str = "") -> list[TreeEntry]:
        """Entries of one tree, in stored (git) order; ``prefix`` is the tree's own path.
        :class:`TreeTooLarge` when it alone has more than :data:`MAX_TREE_PATHS` entries."""
        lead = f"{prefix}/" if prefix else ""
        return [TreeEntry(lead + name, mode, oid) for name, mode, oid in self._tree(tree_oid, path=prefix)]

    def walk(self, tree_oid: str, prefix: str = "") -> Iterator[TreeEntry]:
        """Every non-tree entry below ``tree_oid``, in ``git ls-tree -r`` order, iteratively (a
        stack of open folders, never Python recursion). Each entry is counted as it is reached, so
        a tree over :data:`MAX_TREE_PATHS`, :data:`MAX_TREE_DEPTH` or :data:`MAX_TREE_BYTES` raises
        :class:`TreeTooLarge` after at most that much work, whatever it would expand to."""
        count = TreeCount(self.top_level)
        start = len(prefix.split("/")) if prefix else 0
        stack = [(iter(self._tree(tree_oid, count, prefix)), prefix, start)]
        while stack:
            entries, lead, depth = stack[-1]
            item = next(entries, None)
            if item is None:
                stack.pop()
                continue
            name, mode, oid = item
            path = f"{lead}/{name}" if lead else name
            count.add(path, depth + 1)
            if mode == TREE_MODE:
                stack.append((iter(self._tree(oid, count, path)), path, depth + 1))
            else:
                yield TreeEntry(path, mode, oid)

    def oversized(self, tree_oid: str) -> TreeTooLarge | None:
        """Why ``tree_oid`` is over a cap (None when every walk of it fits), cached per tree: asked
        before libgit2 itself compares the tree with something (status, the staged diff), which it
        would do for every path, with no cap."""
        if tree_oid not in self._verdicts:
            verdict: TreeTooLarge | None = None
            try:
                for _ in self.walk(tree_oid):
                    pass
            except TreeTooLarge as error:
                verdict = error
            self._verdicts[tree_oid] = verdict
            if len(self._verdicts) > self._LOOKUP_CACHE_SIZE:
                self._verdicts.popitem(last=False)
        return self._verdicts[tree_oid]

    def files(self, tree_oid: str, prefix: str = "") -> Iterator[tuple[str, str, str]]:
        """``(path, mode, oid)`` of every non-tree entry below ``tree_oid``, as ``git ls-tree -r``."""
        for entry in self.walk(tree_oid, prefix.rstrip("/")):
            yield entry.path, entry.mode, entry.oid

    def lookup(self, tree_oid: str, name: str) -> tuple[str, str] | None:
        """(oid, object type) of the entry ``name`` directly inside ``tree_oid``, without listing
        it (libgit2 searches the sorted tree: one small look-up in a folder of thousands), cached."""
        key = (tree_oid, name)
        if key in self._lookups:
            self._lookups.move_to_end(key)
            return self._lookups[key]
        result: tuple[str, str] | None = None
        if "\n" not in name and name not in ("", ".", ".."):
            result = self.entry(tree_oid, name)
        self._lookups[key] = result
        if len(self._lookups) > self._LOOKUP_CACHE_SIZE:
            self._lookups.popitem(last=False)
        return result

    def read_blob(self, oid: str) -> bytes | None:
        """The blob's bytes (a symlink's target text), or None if it is missing or not a blob.
        Small blobs are cached by object id: the same core files are read on every turn."""
        cached = self._blobs.get(oid)
        if cached is not None:
            self._blobs.move_to_end(oid)
            return cached
        found = self.read(oid)
        if found is None or found[0] != "blob":
            return None
        data = found[1]
        if len(data) <= self._BLOB_CACHE_MAX_BLOB:
            self._blobs[oid] = data
            self._cached_blob_bytes += len(data)
            while self._cached_blob_bytes > self._BLOB_CACHE_BYTES:
                _, dropped = self._blobs.popitem(last=False)
                self._cached_blob_bytes -= len(dropped)
        return data

    def ever_had(self, revision: str, path: str) -> bool:
        """Whether any commit reachable from ``revision`` has ``path`` (so ``git log -1 revision --
        path`` names one)."""
        pygit2 = libgit2()
        try:
            start = self._repo.revparse_single(revision).peel(pygit2.Commit)
            for commit in self._repo.walk(start.id):
                if path in commit.tree:
                    return True
        except (KeyError, ValueError, pygit2.GitError):
            return False
        return False

    def head(self) -> str | None:
        """The commit ``HEAD`` points at; None while the branch is unborn."""
        found = self.resolve("HEAD")
        return None if found is None else found[0]

    def entry(self, tree_oid: str, path: str) -> tuple[str, str] | None:
        """(oid, type) of ``path`` below tree ``tree_oid`` (``<tree>:<path>``), else None."""
        pygit2 = libgit2()
        try:
            tree = self._repo[tree_oid]
            found = tree[path]
        except (KeyError, ValueError, TypeError, UnicodeEncodeError, pygit2.GitError):
            return None
        return str(found.id), found.type_str

    def status(self, untracked: str = "normal") -> tuple[tuple[str, str], ...]:
        """``(XY, path)`` as ``git status --porcelain=v1 --untracked-files=<untracked>`` gives them
        (``normal`` collapses untracked folders, ``all`` lists their files; ignored files are left
        out; any conflict reads ``UU``; renames are not detected, so one is a deletion and an
        addition)."""
        pygit2 = libgit2()
        head = self.resolve("HEAD")
        if head is not None and self.oversized(head[1]) is not None:
            return self._unstaged(untracked)
        try:
            found = self._repo.status(untracked_files=untracked, ignored=False)
        except pygit2.GitError as error:
            raise self._fail("status", error) from error
        return tuple(sorted(((_porcelain_code(int(flags)), path) for path, flags in found.items()), key=_by_path))

    def _unstaged(self, untracked: str) -> tuple[tuple[str, str], ...]:
        """:meth:`status` of the work tree against the index only (``" M"``, ``" D"``, ``" T"``,
        ``"??"``), for a ``HEAD`` whose tree is over a cap: comparing it with the index would list
        every path it expands to. The audit names that ``HEAD`` instead."""
        pygit2 = libgit2()
        flags = pygit2.enums.DiffOption.NORMAL
        if untracked != "no":
            flags |= pygit2.enums.DiffOption.INCLUDE_UNTRACKED
            if untracked == "all":
                flags |= pygit2.enums.DiffOption.RECURSE_UNTRACKED_DIRS
        try:
            diff = self._repo.diff(flags=flags)
            codes = {"M": " M", "D": " D", "T": " T", "?": "??", "U": "??"}
            found = [
                (codes[delta.status_char()], delta.new_file.path if delta.status_char() != "D" else delta.old_file.path)
                for delta in diff.deltas
                if delta.status_char() in codes
            ]
        except pygit2.GitError as error:
            raise self._fail("status", error) from error
        return tuple(sorted(found, key=_by_path))

    def operation(self) -> str | None:
        """``"merge in progress"``/``"rebase in progress"`` when one was left half-done."""
        if (self.git_dir / "MERGE_HEAD").exists():
            return "merge in progress"
        if (self.git_dir / "rebase-merge").exists() or (self.git_dir / "rebase-apply").exists():
            return "rebase in progress"
        return None

    def has_remote(self, name: str = "origin") -> bool:
        try:
            return bool(self._repo.remotes[name].url)
        except (KeyError, ValueError, libgit2().GitError):
            return False

    def config(self, key: str) -> str | None:
        try:
            value = self._repo.config[key]
        except (KeyError, ValueError, libgit2().GitError):
            return None
        return str(value)

    def refs(self, prefix: str) -> tuple[tuple[str, str], ...]:
        """(full ref name, target oid) of every direct ref under ``prefix``, sorted by name."""
        pygit2 = libgit2()
        out: list[tuple[str, str]] = []
        try:
            for name in self._repo.references:
                if name.startswith(prefix):
                    target = self._repo.references[name].resolve().target
                    out.append((name, str(target)))
        except pygit2.GitError as error:
            raise self._fail("for-each-ref", error) from error
        return tuple(sorted(out))

    def reflog(self, name: str) -> tuple[str, ...]:
        """``git log -g --format=%H <name>``: the commit of each reflog entry of the ref ``name``
        (full name), newest first; empty when there is no such ref or no reflog."""
        pygit2 = libgit2()
        try:
            found = self._repo.references.get(name)
            return () if found is None else tuple(str(entry.oid_new) for entry in found.log())
        except (KeyError, ValueError, OSError, pygit2.GitError):
            return ()

    def is_ancestor(self, ancestor: str, descendant: str) -> bool:
        """``git merge-base --is-ancestor``: equal commits count."""
        pygit2 = libgit2()
        if ancestor == descendant:
            return True
        try:
            return bool(self._repo.descendant_of(descendant, ancestor))
        except (KeyError, ValueError, pygit2.GitError):
            return False

    def ahead(self, base: str, tip: str) -> int:
        """``git rev-list --count base..tip``."""
        try:
            return int(self._repo.ahead_behind(tip, base)[0])
        except (KeyError, ValueError, libgit2().GitError):
            return 0

    def worktrees(self) -> tuple[tuple[Path, str | None], ...]:
        """``(path, branch or None when detached)`` per worktree, the main checkout first, as
        ``git worktree list`` has them (records whose folder is gone included)."""
        common = self.common_dir
        records = [(common.parent, checked_out(common))]
        admin = common / "worktrees"
        try:
            names = sorted(os.listdir(admin))
        except FileNotFoundError:
            names = []
        for name in names:
            try:
                pointer = (admin / name / "gitdir").read_text(encoding="utf-8", errors="surrogateescape").strip()
            except OSError:
                continue
            records.append((Path(pointer).parent, checked_out(admin / name)))
        return tuple(records)


    def dirty(self) -> bool:
        """Anything to commit or untracked (``git status --porcelain`` prints a line)."""
        return bool(self.status())

    def commits(self, base: str | None, tip: str) -> tuple[str, ...]:
        """``git rev-list --reverse --topo-order base..tip`` (all of ``tip``'s history when ``base`` is
        None): oldest first."""
        pygit2 = libgit2()
        try:
            start = self._repo.revparse_single(tip).peel(pygit2.Commit).id
            walker = self._repo.walk(start, pygit2.enums.SortMode.TOPOLOGICAL | pygit2.enums.SortMode.REVERSE)
            if base is not None:
                walker.hide(self._repo.revparse_single(base).peel(pygit2.Commit).id)
            return tuple(str(commit.id) for commit in walker)
        except (KeyError, ValueError, pygit2.GitError) as error:
            raise self._fail("rev-list", error) from error

    def first_parents(self, revision: str, count: int) -> tuple[str, ...]:
        """``git rev-list --first-parent --max-count=<count> revision``: newest first; empty when
        ``revision`` names no commit."""
        pygit2 = libgit2()
        try:
            start = self._repo.revparse_single(revision).peel(pygit2.Commit).id
            walker = self._repo.walk(start, pygit2.enums.SortMode.TOPOLOGICAL)
            walker.simplify_first_parent()
            return tuple(str(commit.id) for _, commit in zip(range(count), walker, strict=False))
        except (KeyError, ValueError, pygit2.GitError):
            return ()

    def is_root(self, commit: str) -> bool:
        """Whether ``commit`` has no parent."""
        try:
            return not self._repo[commit].parent_ids
        except (KeyError, ValueError, libgit2().GitError):
            return False

    def merge_base(self, one: str, other: str) -> str | None:
        pygit2 = libgit2()
        try:
            found = self._repo.merge_base(one, other)
        except (KeyError, ValueError, pygit2.GitError):
            return None
        return None if found is None else str(found)

    def changed_paths(self, base: str, tip: str) -> tuple[str, ...]:
        """``git diff --name-only --no-renames base...tip``: paths that differ between the merge base
        and ``tip``, in git's (byte) order."""
        start = self.merge_base(base, tip)
        old = {} if start is None else self._file_map(start)
        new = self._file_map(tip)
        changed = {path for path in old.keys() | new.keys() if old.get(path) != new.get(path)}
        return tuple(sorted(changed, key=path_bytes))

    def _file_map(self, revision: str) -> dict[str, tuple[str, str]]:
        resolved = self.resolve(revision)
        if resolved is None:
            return {}
        return {path: (mode, oid) for path, mode, oid in self.files(resolved[1])}

    def file_map(self, revision: str) -> dict[str, tuple[str, str]]:
        """``{path: (mode, oid)}`` of every file at ``revision`` (empty when it names no commit)."""
        return self._file_map(revision)


    def ref(self, name: str) -> str | None:
        """The commit the ref ``name`` (full name) points at, or None when there is no such ref."""
        try:
            return self._ref_target(name)
        except (KeyError, ValueError, libgit2().GitError):
            return None

    def _ref_target(self, name: str) -> str | None:
        found = self._repo.references.get(name)
        return None if found is None else str(found.resolve().target)


    def branch(self) -> str | None:
        """The branch this checkout's ``HEAD`` names (short name); None when detached."""
        return head_branch(self.git_dir)

    def rebasing(self) -> bool:
        """Whether a rebase was left in progress here (its state folder is present)."""
        return (self.git_dir / "rebase-merge").exists() or (self.git_dir / "rebase-apply").exists()


_INDEX_CODES: Final = ((1 << 0, "A"), (1 << 1, "M"), (1 << 2, "D"), (1 << 3, "R"), (1 << 4, "T"))
_WORKTREE_CODES: Final = ((1 << 8, "M"), (1 << 9, "D"), (1 << 10, "T"), (1 << 11, "R"))
_WT_NEW: Final = 1 << 7
_CONFLICTED: Final = 1 << 15


def _porcelain_code(flags: int) -> str:
    if flags & _CONFLICTED:
        return "UU"
    if flags & _WT_NEW and not flags & 0x1F:
        return "??"
    x = next((code for bit, code in _INDEX_CODES if flags & bit), " ")
    y = next((code for bit, code in _WORKTREE_CODES if flags & bit), " ")
    return x + y



def _by_path(entry: tuple[str, str]) -> tuple[bool, bytes]:
    """git's porcelain order: changes to tracked paths, then untracked ones, each by path."""
    return entry[0] == "??", path_bytes(entry[1])


def path_bytes(path: str) -> bytes:
    return path.encode("utf-8", "surrogateescape")

"""A batch run's template memory repositories, and the copy each task starts from.

A run makes one seeded repository per distinct set of seed files (``OUT/templates/<key>/memory``,
made by ``init_memory_repo`` as any memory repository is, then packed) and every task's repository
is a copy of it, so a thousand tasks do not each start a dozen git processes to build the same
repository. The copy lays out the template's git folder from what was read of it once per process,
with git's object files hard-linked (far fewer system calls than ``shutil.copytree``, and a
repository of its own that names nothing outside itself), then libgit2 checks out ``HEAD``: it
writes the tracked files and an index holding their own stat data, so git finds the copy clean
without hashing every file at its first status (a copied index holds the template's stat data).
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
import shutil
import threading
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from orchestrator.memfs.errors import GitError
from orchestrator.memfs.git import GitRepo
from orchestrator.memfs.repo import DEFAULT_MEMORY_FILES, head_revision, init_memory_repo, pack

__all__ = ["TemplateTree", "copy_template", "template_repo"]


@dataclass(frozen=True)
class TemplateTree:
    """A template repository as a task's copy needs it, read once: its directories (parents first),
    the files each copy gets its own of (contents kept in memory: git's folder but the index and the
    objects, and the work-tree files git does not track), git's object files, which each copy
    hard-links, and symbolic links. Git never changes an object file in place (it writes a new file
    and renames it, and a commit adds new objects to the copy's own directories), so a link shares
    nothing a task can change in another's repository, as with ``git clone --local``."""

    dirs: tuple[str, ...]
    files: tuple[tuple[str, int, bytes], ...]
    objects: tuple[str, ...]
    links: tuple[tuple[str, str], ...]


_INDEX_FILE = os.path.join(".git", "index")


def _read_tree(root: Path) -> TemplateTree:
    dirs: list[str] = []
    files: list[tuple[str, int, bytes]] = []
    objects: list[str] = []
    links: list[tuple[str, str]] = []
    tracked = frozenset(os.path.normpath(entry.path) for entry in GitRepo(root).tree_entries() or ())
    objects_dir = os.path.join(".git", "objects")
    for here, subdirs, names in os.walk(root):
        rel = os.path.relpath(here, root)
        for name in sorted(subdirs):
            full = os.path.join(here, name)
            if os.path.islink(full):
                links.append((os.path.normpath(os.path.join(rel, name)), os.readlink(full)))
                subdirs.remove(name)
            else:
                dirs.append(os.path.normpath(os.path.join(rel, name)))
        for name in sorted(names):
            full = os.path.join(here, name)
            relpath = os.path.normpath(os.path.join(rel, name))
            if os.path.islink(full):
                if relpath not in tracked:
                    links.append((relpath, os.readlink(full)))
            elif relpath.startswith(objects_dir + os.sep):
                objects.append(relpath)
            elif relpath != _INDEX_FILE and relpath not in tracked:
                with open(full, "rb") as handle:
                    files.append((relpath, os.stat(full).st_mode & 0o7777, handle.read()))
    return TemplateTree(tuple(dirs), tuple(files), tuple(objects), tuple(links))


def copy_template(template: Path, target: Path, tree: TemplateTree) -> None:
    """``target`` as a repository of its own with the template's content: a few dozen system calls
    where ``shutil.copytree`` made a few hundred, then libgit2's checkout of ``HEAD`` (the tracked
    files and a fresh index). An object that cannot be linked (another file system, a link limit)
    is copied. Blocking; :class:`GitError` when the checkout fails."""
    source, root = str(template) + os.sep, str(target) + os.sep
    os.mkdir(target)
    for rel in tree.dirs:
        os.mkdir(root + rel)
    for rel, mode, data in tree.files:
        _write_new(root + rel, mode, data)
    for rel in tree.objects:
        try:
            os.link(source + rel, root + rel)
        except OSError:
            with open(source + rel, "rb") as handle:
                _write_new(root + rel, os.stat(source + rel).st_mode & 0o7777, handle.read())
    for rel, points_to in tree.links:
        os.symlink(points_to, root + rel)
    GitRepo(target).read(lambda repo: repo.checkout_head())


def _write_new(path: str, mode: int, data: bytes) -> None:
    """Create ``path`` with ``data`` and exactly ``mode``."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, mode)
    try:
        os.fchmod(fd, mode)
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view) :]
    finally:
        os.close(fd)


_templates_lock = threading.Lock()
_Identity = tuple[int, int]
_template_bases: dict[Path, tuple[_Identity, str, TemplateTree]] = {}
_known_templates: dict[tuple[Path, tuple[tuple[str, str], ...]], tuple[_Identity, Path, str, TemplateTree]] = {}


def _identity(path: Path) -> _Identity | None:
    """Which folder ``path`` is: a template removed and made again (another run in the same out
    directory and process) is another one, and what was read of the old one must not be used."""
    try:
        found = os.stat(path)
    except FileNotFoundError:
        return None
    return found.st_dev, found.st_ino


def template_repo(root: Path, seeds: Mapping[str, str]) -> tuple[Path, str, TemplateTree]:
    """The template for a task's seed files (over the defaults); tasks with the same seeds look it
    up without hashing them again."""
    wanted = (root, tuple(sorted(seeds.items())))
    known = _known_templates.get(wanted)
    if known is not None and _identity(known[1]) == known[0]:
        return known[1], known[2], known[3]
    files = dict(DEFAULT_MEMORY_FILES)
    files.update(seeds)
    target, base, tree = _make_template(root, files)
    identity = _identity(target)
    if identity is not None:
        _known_templates[wanted] = identity, target, base, tree
    return target, base, tree


def _make_template(root: Path, files: Mapping[str, str]) -> tuple[Path, str, TemplateTree]:
    """The run's seeded memory repository for these files, made once and copied for every task, so
    a thousand tasks do not each build the same repository. A copy is a repository of its own with
    nothing that names where it lives; its first commit is the template's. Made under a temporary
    name and renamed into place, so concurrent tasks and processes (Ray workers) share one; on one
    machine the processes of a run take turns (``_one_builder``), so the second finds the first's
    instead of building its own at the same moment.

    What a copy does not need is left out: the ``*.sample`` hooks ``git init`` copies from git's
    template folder are inert and were 13 of the 33 files every task copied, and so are the rest of
    that folder (``description`` for gitweb, the commented-out ``info/exclude``, the obsolete
    ``branches/``), and so are the template commit's reflog, its ``COMMIT_EDITMSG`` and the empty
    ``refs/tags`` and ``objects/info`` (git makes what it needs of them again; each folder or file is
    ~0.1 ms of a task's setup on ext4); the objects are packed, so each copy links one pack instead
    of a folder per loose object, and the branch is in ``packed-refs``, so a copy has no
    ``refs/heads`` folder until its first commit makes one."""
    key = hashlib.sha256(json.dumps(sorted(files.items()), ensure_ascii=False).encode("utf-8")).hexdigest()[:16]
    target = root / key / "memory"
    with _templates_lock:
        known = _template_bases.get(target)
        if known is not None and _identity(target) == known[0]:
            return target, known[1], known[2]
        if not target.exists():
            root.mkdir(parents=True, exist_ok=True)
            with _one_builder(root / f".{key}.lock"):
                if not target.exists():
                    _build(root, key, files)
        base = head_revision(target)
        if base is None:
            raise GitError(("rev-parse",), 128, "fatal: the template memory repository has no commit", target)
        identity = _identity(target)
        tree = _read_tree(target)
        if identity is not None:
            _template_bases[target] = identity, base, tree
    return target, base, tree


@contextmanager
def _one_builder(path: Path) -> Iterator[None]:
    """An exclusive ``flock`` on ``path`` while a template is built: the driver and its workers
    start their first tasks at the same moment, and without it each built the same template (all of
    its tasks waiting meanwhile) for one to throw it away. Only an optimisation: where the lock
    cannot be had (a file system without ``flock``) the builders race as before and the rename
    settles it."""
    try:
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o666)
    except OSError:
        yield
        return
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
        except OSError:
            pass
        yield
    finally:
        os.close(fd)


def _build(root: Path, key: str, files: Mapping[str, str]) -> None:
    """Build the template under a temporary name and rename it to ``root/key`` (a failed build
    leaves nothing behind): ``init_memory_repo`` (``git init``, the hook, the files, the first
    commit through the validator), then packed. An invalid seed is ``init_memory_repo``'s
    ``MemoryCommitRejected``, with the validator's report."""
    staging = root / f".{key}.{os.getpid()}.{threading.get_ident()}"
    shutil.rmtree(staging, ignore_errors=True)
    memory = staging / "memory"
    try:
        init_memory_repo(memory, files=dict(files))
        shutil.rmtree(memory / ".git" / "logs", ignore_errors=True)
        pack(memory)
        _drop_inert(memory / ".git")
        os.rename(staging, root / key)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        if not (root / key / "memory").exists():
            raise


def _drop_inert(git_dir: Path) -> None:
    for sample in (git_dir / "hooks").glob("*.sample"):
        sample.unlink()
    for inert in (git_dir / "description", git_dir / "info" / "exclude", git_dir / "COMMIT_EDITMSG"):
        inert.unlink(missing_ok=True)
    # the reflog of the template's own first commit: git starts a task's at its first commit
    shutil.rmtree(git_dir / "logs", ignore_errors=True)
    for folder in (
        git_dir / "info", git_dir / "branches", git_dir / "refs" / "tags", git_dir / "refs" / "heads",
        git_dir / "objects" / "info",
    ):
        if folder.is_dir() and not any(folder.iterdir()):
            folder.rmdir()

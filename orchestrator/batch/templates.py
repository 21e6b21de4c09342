"""A batch run's template memory repositories, and the copy each task starts from.

A run makes one seeded repository per distinct set of seed files (``OUT/templates/<key>/memory``:
``git init``, config, first commit through the validator) and every task's repository is a copy of
it, so a thousand tasks do not each start a dozen git processes to build the same repository. The
copy is made from what was read of the template once per process (directories, the mutable files'
contents) with git's object files hard-linked: far fewer system calls than ``shutil.copytree``,
and a repository of its own that names nothing outside itself.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import threading
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from orchestrator.memfs.git import run
from orchestrator.memfs.repo import DEFAULT_MEMORY_FILES, head_revision, init_memory_repo

__all__ = ["TemplateTree", "copy_template", "template_repo"]


@dataclass(frozen=True)
class TemplateTree:
    """A template repository as a task's copy needs it, read once: its directories (parents first),
    the files each copy gets its own of (contents kept in memory), and git's object files, which
    each copy hard-links. Git never changes an object file in place (it writes a new file and
    renames it, and a commit adds new objects to the copy's own directories), so a link shares
    nothing a task can change in another's repository, as with ``git clone --local``."""

    dirs: tuple[str, ...]
    files: tuple[tuple[str, int, bytes], ...]
    objects: tuple[str, ...]
    links: tuple[tuple[str, str], ...]


def _read_tree(root: Path) -> TemplateTree:
    dirs: list[str] = []
    files: list[tuple[str, int, bytes]] = []
    objects: list[str] = []
    links: list[tuple[str, str]] = []
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
                links.append((relpath, os.readlink(full)))
            elif relpath.startswith(objects_dir + os.sep):
                objects.append(relpath)
            else:
                with open(full, "rb") as handle:
                    files.append((relpath, os.stat(full).st_mode & 0o7777, handle.read()))
    return TemplateTree(tuple(dirs), tuple(files), tuple(objects), tuple(links))


def copy_template(template: Path, target: Path, tree: TemplateTree) -> None:
    """``target`` as a repository of its own with the template's content: a few dozen system calls
    where ``shutil.copytree`` made a few hundred. An object that cannot be linked (another file
    system, a link limit) is copied."""
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


def _write_new(path: str, mode: int, data: bytes) -> None:
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
    """The run's seeded memory repository for these files, made once (``git init``, config, first
    commit through the validator) and copied for every task, so a thousand tasks do not each start
    half a dozen git processes to build the same repository. A copy is a repository of its own with
    nothing that names where it lives; its first commit is the template's. Made under a temporary
    name and renamed into place, so concurrent tasks and processes (Ray workers) share one. The
    ``*.sample`` hooks ``git init`` copies from git's template folder are inert and were 13 of the 33
    files every task copied, and so are the rest of that folder (``description`` for gitweb, the
    commented-out ``info/exclude``, the obsolete ``branches/``), and so are the template commit's
    reflog, its ``COMMIT_EDITMSG`` and the empty ``refs/tags`` and ``objects/info`` (git makes what it
    needs of them again; each folder or file is ~0.1 ms of a task's setup on ext4); the objects are
    packed, so each copy links one pack instead of a folder per loose object, and the branch is in
    ``packed-refs``, so a copy has no ``refs/heads`` folder until its first commit makes one."""
    key = hashlib.sha256(json.dumps(sorted(files.items()), ensure_ascii=False).encode("utf-8")).hexdigest()[:16]
    target = root / key / "memory"
    with _templates_lock:
        known = _template_bases.get(target)
        if known is not None and _identity(target) == known[0]:
            return target, known[1], known[2]
        if not target.exists():
            root.mkdir(parents=True, exist_ok=True)
            staging = root / f".{key}.{os.getpid()}.{threading.get_ident()}"
            shutil.rmtree(staging, ignore_errors=True)
            init_memory_repo(staging / "memory", files=dict(files))
            git_dir = staging / "memory" / ".git"
            for sample in (git_dir / "hooks").glob("*.sample"):
                sample.unlink()
            for inert in (git_dir / "description", git_dir / "info" / "exclude", git_dir / "COMMIT_EDITMSG"):
                inert.unlink(missing_ok=True)
            # the reflog of the template's own first commit: git starts a task's at its first commit
            shutil.rmtree(git_dir / "logs", ignore_errors=True)
            # one pack of the first commit's objects: a copy links two files and makes no fan-out folders
            run(staging / "memory", "repack", "-a", "-d", "-q", "-n", harness=True)
            # the branch in packed-refs: a copy needs no refs/heads folder until it commits
            run(staging / "memory", "pack-refs", "--all", harness=True)
            for folder in (
                git_dir / "info", git_dir / "branches", git_dir / "refs" / "tags", git_dir / "refs" / "heads",
                git_dir / "objects" / "info",
            ):
                if folder.is_dir() and not any(folder.iterdir()):
                    folder.rmdir()
            try:
                os.rename(staging, root / key)
            except OSError:
                shutil.rmtree(staging, ignore_errors=True)
                if not target.exists():
                    raise
        base = head_revision(target)
        if base is None:
            raise RuntimeError(f"{target}: the template memory repository has no commit")
        identity = _identity(target)
        tree = _read_tree(target)
        if identity is not None:
            _template_bases[target] = identity, base, tree
    return target, base, tree

"""A batch run's template memory repositories, and the copy each task starts from.

A run makes one seeded repository per distinct set of seed files (``OUT/templates/<key>/memory``:
``git init``, config, the hook, first commit through the validator; in-process, but for one ``git
config`` question, where that gives what git gives) and every task's repository is a copy of it, so
a thousand tasks do not each start a dozen git processes to build the same repository. The
copy is made from what was read of the template once per process (directories, the mutable files'
contents) with git's object files hard-linked: far fewer system calls than ``shutil.copytree``,
and a repository of its own that names nothing outside itself.
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
import shutil
import struct
import threading
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from types import MappingProxyType

from orchestrator.memfs.git import commit_packed, init_local, run, set_local_config, stage_all
from orchestrator.memfs.hook import install_hook
from orchestrator.memfs.locks import LOCK_FILE_NAME
from orchestrator.memfs.policy import ROOT_MARKER
from orchestrator.memfs.repo import (
    DEFAULT_MEMORY_FILES,
    INITIAL_COMMIT_MESSAGE,
    MemoryCommitRejected,
    head_revision,
    init_memory_repo,
)
from orchestrator.memfs.snapshot import Entry, Snapshot, diff_status, path_order_key
from orchestrator.memfs.validator import format_report, validate_snapshot

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
    index: _Index | None = None
    """Where the stat data of each work-tree file sits in ``.git/index`` (``None``: the index is
    copied as it is)."""
    mtimes: tuple[tuple[str, int], ...] = ()
    """The template's work-tree files and their modification times (ns)."""


@dataclass(frozen=True)
class _Index:
    """A version 2 or 3 index of the template with a SHA-1 trailer: the offset of each tracked
    work-tree file's entry. A copy's index is the template's with those entries' stat data (times,
    device, inode, owner, size) replaced by the copy's own files', so that git and libgit2 find the
    copy's files clean by their stat data, as they find a fresh clone's; with the template's stat
    data every status hashed every file (and looked up its attributes), each turn."""

    entries: tuple[tuple[str, int], ...]


_INDEX_ENTRY = struct.Struct(">10I20sH")
"""ctime s, ns; mtime s, ns; dev; ino; mode; uid; gid; size; object id (SHA-1); flags."""
_INDEX_FILE = os.path.join(".git", "index")


def _parse_index(data: bytes, tracked: frozenset[str]) -> _Index | None:
    """The entries of ``tracked`` files in ``data``, or ``None`` where the index is not one this
    understands (another version, another hash, an entry not at stage 0): the copy then keeps the
    template's index as it is, and its statuses hash the files, as before."""
    if len(data) < 12 + 20 or data[:4] != b"DIRC" or hashlib.sha1(data[:-20]).digest() != data[-20:]:
        return None
    version, count = struct.unpack_from(">II", data, 4)
    if version not in (2, 3):
        return None
    offset, entries = 12, []
    for _ in range(count):
        if offset + _INDEX_ENTRY.size > len(data) - 20:
            return None
        flags = _INDEX_ENTRY.unpack_from(data, offset)[-1]
        name_at = offset + _INDEX_ENTRY.size + (2 if flags & 0x4000 else 0)
        end = data.find(b"\0", name_at)
        if end < 0 or flags & 0x3000:
            return None
        path = data[name_at:end].decode("utf-8", "surrogateescape")
        if path in tracked:
            entries.append((path, offset))
        offset += (end - offset + 8) // 8 * 8
    if {path for path, _ in entries} != tracked:
        return None
    return _Index(tuple(entries))


def _fresh_index(data: bytes, index: _Index, stats: Mapping[str, os.stat_result]) -> bytes:
    """The template's index ``data`` with the copy's stat data for its work-tree files."""
    image = bytearray(data)
    for path, offset in index.entries:
        st = stats[path]
        old = _INDEX_ENTRY.unpack_from(image, offset)
        _INDEX_ENTRY.pack_into(
            image, offset,
            int(st.st_ctime_ns // 1_000_000_000) & 0xFFFFFFFF, st.st_ctime_ns % 1_000_000_000,
            int(st.st_mtime_ns // 1_000_000_000) & 0xFFFFFFFF, st.st_mtime_ns % 1_000_000_000,
            st.st_dev & 0xFFFFFFFF, st.st_ino & 0xFFFFFFFF, old[6], st.st_uid & 0xFFFFFFFF, st.st_gid & 0xFFFFFFFF,
            st.st_size & 0xFFFFFFFF, old[10], old[11],
        )
    image[-20:] = hashlib.sha1(image[:-20]).digest()
    return bytes(image)


def _read_tree(root: Path) -> TemplateTree:
    dirs: list[str] = []
    files: list[tuple[str, int, bytes]] = []
    objects: list[str] = []
    links: list[tuple[str, str]] = []
    mtimes: list[tuple[str, int]] = []
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
                found = os.stat(full)
                with open(full, "rb") as handle:
                    files.append((relpath, found.st_mode & 0o7777, handle.read()))
                if not relpath.startswith(".git" + os.sep):
                    mtimes.append((relpath, found.st_mtime_ns))
    index_data = next((data for rel, _, data in files if rel == _INDEX_FILE), None)
    index = None
    if index_data is not None and os.sep == "/":
        index = _parse_index(index_data, frozenset(rel for rel, _ in mtimes))
    return TemplateTree(tuple(dirs), tuple(files), tuple(objects), tuple(links), index, tuple(mtimes))


def copy_template(template: Path, target: Path, tree: TemplateTree) -> None:
    """``target`` as a repository of its own with the template's content: a few dozen system calls
    where ``shutil.copytree`` made a few hundred. An object that cannot be linked (another file
    system, a link limit) is copied.

    The work-tree files keep the template's modification times (as ``cp -p`` keeps them) and the
    index, written after them, records the copy's own stat data (``_Index``). A file's time must be
    older than the index for its entry to count as clean (an entry as new as its index is "racily
    clean" and its file is hashed each time); the files are written within the same clock tick as
    the index, the template's were not (but for a template made in that same tick, which is then
    hashed as before). Any later change to a file gives it a new time, so it is seen as ever."""
    source, root = str(template) + os.sep, str(target) + os.sep
    os.mkdir(target)
    for rel in tree.dirs:
        os.mkdir(root + rel)
    mtimes = dict(tree.mtimes) if tree.index is not None else {}
    stats: dict[str, os.stat_result] = {}
    index_data: bytes | None = None
    for rel, mode, data in tree.files:
        if rel in mtimes:
            found = _write_new(root + rel, mode, data, mtime_ns=mtimes[rel])
            assert found is not None
            stats[rel] = found
        elif rel == _INDEX_FILE and tree.index is not None:
            index_data = data
        else:
            _write_new(root + rel, mode, data)
    if index_data is not None and tree.index is not None:
        index_mode = next(mode for rel, mode, _ in tree.files if rel == _INDEX_FILE)
        _write_new(root + _INDEX_FILE, index_mode, _fresh_index(index_data, tree.index, stats))
    for rel in tree.objects:
        try:
            os.link(source + rel, root + rel)
        except OSError:
            with open(source + rel, "rb") as handle:
                _write_new(root + rel, os.stat(source + rel).st_mode & 0o7777, handle.read())
    for rel, points_to in tree.links:
        os.symlink(points_to, root + rel)


def _write_new(path: str, mode: int, data: bytes, *, mtime_ns: int | None = None) -> os.stat_result | None:
    """Create ``path`` with ``data``; with ``mtime_ns``, give it that access and modification time
    and return its stat data as it is then."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, mode)
    try:
        os.fchmod(fd, mode)
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view) :]
        if mtime_ns is None:
            return None
        os.utime(fd, ns=(mtime_ns, mtime_ns))
        return os.fstat(fd)
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
    instead of building its own at the same moment. Built in-process (``_build_in_process``) where
    that gives what git would; otherwise (``_build_with_git``) with git itself.

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
            raise RuntimeError(f"{target}: the template memory repository has no commit")
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
    leaves nothing behind)."""
    staging = root / f".{key}.{os.getpid()}.{threading.get_ident()}"
    shutil.rmtree(staging, ignore_errors=True)
    memory = staging / "memory"
    try:
        if not _build_in_process(memory, files):
            shutil.rmtree(memory, ignore_errors=True)
            _build_with_git(memory, files)
        _drop_inert(memory / ".git")
        os.rename(staging, root / key)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        if not (root / key / "memory").exists():
            raise


_QUESTIONS = (
    r"^(user|author|committer)\.(name|email)$|^commit\.gpgsign$|^i18n\.commitencoding$|^filter\..*\.(clean|process)$"
    r"|^init\.(templatedir|defaultobjectformat|defaultrefformat)$|^core\.sharedrepository$"
)
"""The settings that decide whether the template can be made in-process, asked of git in one process."""
_GIT_DECIDES = frozenset(
    {"i18n.commitencoding", "init.templatedir", "init.defaultobjectformat", "init.defaultrefformat", "core.sharedrepository"}
)
"""Settings whose mere presence leaves the template to git (its template folder, hash, ref storage,
file modes, commit encoding)."""
_GIT_ENVIRONMENT = ("GIT_AUTHOR_DATE", "GIT_COMMITTER_DATE", "GIT_TEMPLATE_DIR", "GIT_DEFAULT_HASH", "GIT_DEFAULT_REF_FORMAT")
"""The same, set in the environment."""
_SPECIAL_NAMES = frozenset({".git", ".gitignore", ".gitattributes", ".gitmodules"})
_FALSE = frozenset({"false", "no", "off", "0"})


def _build_in_process(memory: Path, files: Mapping[str, str]) -> bool:
    """What ``init_memory_repo`` does (``git init``, a local identity where git has none, the hook,
    the files, the first commit through the validator), in-process but for one ``git config`` question,
    then packed as ``_build_with_git`` packs it: ~5 ms against ~60 ms and a dozen processes. False
    (``memory`` may hold a repository without commits, for the caller to remove) where the result
    could differ from git's: seed paths git treats specially, a fixed commit date, signing, another
    commit encoding, an external filter driver, a template folder, another hash or ref storage or
    shared file modes configured. An invalid seed is the same ``MemoryCommitRejected``, with the
    same report, as from ``init_memory_repo``."""
    if any(not _plain(rel) for rel in files) or any(os.environ.get(name) for name in _GIT_ENVIRONMENT):
        return False
    init_local(memory, branch="main")
    said = _settings(memory)
    if said.get("commit.gpgsign", "false").lower() not in _FALSE or _GIT_DECIDES & set(said):
        return False
    if any(name.startswith("filter.") for name in said):
        return False
    identity = {name: value for name, value in _IDENTITY.items() if name not in said}
    if identity:
        set_local_config(memory, identity)
        said.update(identity)
    install_hook(memory, policy=ROOT_MARKER)
    for rel, text in files.items():
        target = memory / rel
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(text, encoding="utf-8")
    staged = stage_all(memory)
    result = validate_snapshot(_snapshot(staged), ROOT_MARKER, os.environ)
    if not result.ok:
        raise MemoryCommitRejected(format_report(result), result.errors)
    os.close(os.open(memory / ".git" / LOCK_FILE_NAME, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o666))
    commit_packed(
        memory, branch="main", message=INITIAL_COMMIT_MESSAGE,
        author=_who("author", said), committer=_who("committer", said),
    )
    return True


_IDENTITY = {"user.name": "reverie", "user.email": "reverie@localhost"}
"""What ``init_memory_repo`` gives a repository on a machine without a git identity."""


def _plain(rel: str) -> bool:
    parts = rel.split("/")
    return all(part not in ("", ".", "..") and part.lower() not in _SPECIAL_NAMES for part in parts) and "\\" not in rel


def _settings(memory: Path) -> dict[str, str]:
    """The ``_QUESTIONS`` settings as git sees them in ``memory`` (global, system, includes), the
    last value of each."""
    said: dict[str, str] = {}
    for line in run(memory, "config", "--get-regexp", _QUESTIONS, check=False).stdout.splitlines():
        name, _, value = line.partition(" ")
        said[name.lower()] = value
    return said


def _who(role: str, said: Mapping[str, str]) -> tuple[str, str]:
    """The name and email git would give ``role`` (author or committer): the environment, then
    ``<role>.name``, then ``user.name`` (and the same for the email)."""
    upper = role.upper()
    name = os.environ.get(f"GIT_{upper}_NAME") or said.get(f"{role}.name") or said["user.name"]
    email = os.environ.get(f"GIT_{upper}_EMAIL") or said.get(f"{role}.email") or said["user.email"]
    return name, email


def _snapshot(staged: Mapping[str, tuple[str, str, bytes]]) -> Snapshot:
    """The validator's view of a first commit: the index as staged, no ``HEAD``, every path added."""
    index = {path: Entry(mode, oid) for path, (mode, oid, _) in sorted(staged.items(), key=lambda item: path_order_key(item[0]))}
    return Snapshot(
        index=MappingProxyType(index),
        head=None,
        blobs=MappingProxyType({oid: data for _, oid, data in staged.values()}),
        changes=MappingProxyType(diff_status(index, None)),
    )


def _build_with_git(memory: Path, files: Mapping[str, str]) -> None:
    """The template made by ``init_memory_repo`` (git processes), then packed."""
    init_memory_repo(memory, files=dict(files))
    shutil.rmtree(memory / ".git" / "logs", ignore_errors=True)
    # one pack of the first commit's objects: a copy links two files and makes no fan-out folders
    run(memory, "repack", "-a", "-d", "-q", "-n", harness=True)
    # the branch in packed-refs: a copy needs no refs/heads folder until it commits
    run(memory, "pack-refs", "--all", harness=True)


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

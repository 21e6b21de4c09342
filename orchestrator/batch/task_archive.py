"""One finished task's files as one archive, so a task that ran on another machine (a Ray node with
no disk shared with the driver) comes back whole and the driver writes it into the run directory.

What travels is every file of the task under the run directory, by the layout ``runner.task_paths``
gives: its agent folder (the memory repository with its work tree, config, hook, reflog and every
branch, kept reflections included), its store (the conversation, so the report's transcript, and
its events), its bash workspace and its event log. Nothing else: the run's templates are rebuilt
where a task runs.

Why an archive (tar, gzip level 1) rather than a git bundle of the memory repository: a bundle
carries commits and refs only, so the work tree, the repository's config and hook, its reflog and
anything not yet committed would be lost or rebuilt by a clone step that differs from what the
task left; the archive is the repository exactly as a local run leaves it, so ``reverie report``,
``--resume`` and ``--retry-failed`` cannot tell the two apart. Git's objects are compressed
already, so gzip's level 1 saves most of what is to save (the store and event log) for little CPU.

Unpacking trusts nothing in the archive: each member must lie under one of the task's own paths
and be a plain file, directory or link inside them (``tarfile``'s ``data`` filter), and the task's
earlier files are removed first (as ``runner`` does before a rerun).
"""

from __future__ import annotations

import io
import os
import shutil
import tarfile
from pathlib import Path

from orchestrator.base.errors import UsageError
from orchestrator.batch.runner import task_paths

__all__ = ["ArchiveError", "pack_task", "unpack_task"]

_STORE_SUFFIXES = ("", "-wal")
_STALE_SUFFIXES = ("", "-wal", "-shm", "-journal")


class ArchiveError(UsageError):
    """A task's archive names a file outside the task's own paths, or cannot be read."""


def _roots(out_dir: Path, task_id: str) -> tuple[list[str], list[str]]:
    """The task's folders and single files, relative to ``out_dir``."""
    paths = task_paths(out_dir, task_id)
    folders = [os.path.relpath(p, out_dir) for p in (paths.agent, paths.workspace)]
    store = os.path.relpath(paths.store, out_dir)
    files = [store + s for s in _STORE_SUFFIXES] + [os.path.relpath(paths.events, out_dir)]
    return folders, files


def pack_task(out_dir: Path, task_id: str) -> bytes:
    """The task's files under ``out_dir`` as a gzip'd tar (blocking). Missing parts are left out
    (a task that failed early has no store); the unpacking side removes what is not there."""
    folders, files = _roots(out_dir, task_id)
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w:gz", compresslevel=1) as archive:
        for rel in folders + files:
            if os.path.lexists(out_dir / rel):
                archive.add(out_dir / rel, arcname=rel, recursive=True)
    return buffer.getvalue()


def _inside(name: str, folders: list[str], files: list[str]) -> bool:
    norm = os.path.normpath(name)
    return norm in files or any(norm == f or norm.startswith(f + os.sep) for f in folders)


def unpack_task(out_dir: Path, task_id: str, data: bytes) -> None:
    """Replace the task's files under ``out_dir`` with the archive's (blocking)."""
    folders, files = _roots(out_dir, task_id)
    try:
        with tarfile.open(fileobj=io.BytesIO(data), mode="r:gz") as archive:
            members = archive.getmembers()
            for member in members:
                if not _inside(member.name, folders, files):
                    raise ArchiveError(f"task {task_id}: its archive names {member.name!r}, outside the task's files")
                if member.islnk() and not _inside(member.linkname, folders, files):
                    raise ArchiveError(f"task {task_id}: its archive links to {member.linkname!r}, outside the task's files")
            for rel in folders:
                if os.path.lexists(out_dir / rel):
                    shutil.rmtree(out_dir / rel)
            store = str(task_paths(out_dir, task_id).store)
            for stale in [store + s for s in _STALE_SUFFIXES] + files:
                try:
                    os.unlink(out_dir / stale)
                except FileNotFoundError:
                    pass
            # tarfile makes a member's missing parents without exist_ok: two tasks unpacking at once
            # raced on the shared ``home/agents`` ("File exists"), so the parents are made first
            for parent in {os.path.dirname(member.name) for member in members} - {""}:
                os.makedirs(out_dir / parent, exist_ok=True)
            archive.extractall(out_dir, members=members, filter="data")
    except (tarfile.TarError, EOFError, OSError) as exc:
        raise ArchiveError(f"task {task_id}: its archive cannot be unpacked into {out_dir}: {exc}") from exc

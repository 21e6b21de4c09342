"""The state git keeps for an operation in progress, and whether reverie started it.

A stopped rebase, cherry-pick, revert or merge is a set of files in the checkout's git folder
(``rebase-merge/`` with its todo list, ``rebase-apply/``, ``sequencer/``, ``MERGE_HEAD`` and its
companions). ``git rebase --continue`` runs the todo list's ``exec`` lines, and ``--abort`` resets
the branch named in ``head-name`` to ``orig-head``: that state is code and orders for whoever
continues. A sandboxed command can write it (the git folder stays writable for commits), so reverie
treats it as it treats a planted ``commondir`` (``memfs.guard``):

* **Reverie's own operation is recorded.** When a git of reverie's stops (merge-back's rebase on a
  conflict, or fails), :func:`record` keeps a digest of the state in ``<common>/reverie/operations/``,
  a folder no sandbox can write; :func:`intact` compares before reverie continues or aborts, and a
  state that changed, or that no git of reverie's left, is dropped without being read (:func:`drop`),
  never continued or aborted through git. The sandbox also mounts such a state read-only
  (``tools.sandbox``); this check is the second line.
* **An operation reverie did not start is removed** from the main checkout (:func:`settle`), with
  a ``memory.warning`` finding, before anything could advise running it: HEAD, the index and the
  branches stay as they are (what ``git rebase --quit`` does), so no commit is dropped.

Blocking (small files); call from a worker thread.
"""

from __future__ import annotations

import hashlib
import os
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Final

from orchestrator.base import blocking
from orchestrator.memfs.guard import Layout, locate, report

__all__ = [
    "MARKERS",
    "STATE_NAMES",
    "digest",
    "drop",
    "in_progress",
    "intact",
    "present",
    "record",
    "record_sync",
    "settle",
    "started_by_reverie",
]

MARKERS: Final = ("rebase-merge", "rebase-apply", "sequencer", "MERGE_HEAD", "CHERRY_PICK_HEAD", "REVERT_HEAD")
"""What makes git (and ``git status``) say an operation is in progress."""
STATE_NAMES: Final = (
    *MARKERS, "MERGE_MSG", "MERGE_MODE", "MERGE_RR", "SQUASH_MSG", "REBASE_HEAD", "AUTO_MERGE", "MERGE_AUTOSTASH",
)
"""Everything git reads to go on with an operation, in a checkout's own git folder."""
_RECORDS: Final = Path("reverie") / "operations"


def present(git_dir: Path) -> tuple[str, ...]:
    """The markers of an operation in progress found in ``git_dir`` (none: empty)."""
    return tuple(name for name in MARKERS if os.path.lexists(git_dir / name))


def digest(git_dir: Path) -> str:
    """A hash of every name in :data:`STATE_NAMES` under ``git_dir``: file contents, link targets
    and folder listings, never following a link."""
    hasher = hashlib.sha256()
    for name in STATE_NAMES:
        _feed(hasher.update, git_dir / name, name)
    return hasher.hexdigest()


def _feed(update: Callable[[bytes], None], path: Path, label: str) -> None:
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        return
    update(f"\0{label}\0{st.st_mode:o}\0".encode("utf-8", "surrogateescape"))
    if os.path.islink(path):
        update(os.fsencode(os.readlink(path)))
    elif path.is_dir():
        for child in sorted(os.listdir(path)):
            _feed(update, path / child, f"{label}/{child}")
    else:
        update(path.read_bytes())


def _record_path(layout: Layout) -> Path:
    key = "main" if not layout.linked else f"worktree-{layout.git_dir.name}"
    return layout.common_dir / _RECORDS / key


def _layout(checkout: Path) -> Layout:
    layout = locate(checkout)
    if layout is None:
        raise FileNotFoundError(f"{checkout}: not a git checkout")
    return layout


def _record(layout: Layout) -> None:
    path = _record_path(layout)
    if not present(layout.git_dir):
        path.unlink(missing_ok=True)
        return
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    tmp.write_text(digest(layout.git_dir) + "\n", encoding="ascii")
    os.replace(tmp, path)


def _intact(layout: Layout) -> bool:
    try:
        said = _record_path(layout).read_text(encoding="ascii").strip()
    except (OSError, UnicodeDecodeError):
        return False
    return said == digest(layout.git_dir)


def _drop(layout: Layout) -> tuple[str, ...]:
    removed: list[str] = []
    for name in STATE_NAMES:
        path = layout.git_dir / name
        if not os.path.lexists(path):
            continue
        if path.is_dir() and not path.is_symlink():
            shutil.rmtree(path)
        else:
            path.unlink()
        removed.append(name)
    _record_path(layout).unlink(missing_ok=True)
    return tuple(removed)


async def in_progress(checkout: Path) -> tuple[str, ...]:
    """The markers of an operation in progress in ``checkout``'s own git folder."""
    return await blocking.run_sync("files", lambda: present(_layout(checkout).git_dir))


def started_by_reverie(checkout: Path) -> bool:
    """Whether the operation in progress in ``checkout`` is one reverie's git left and recorded,
    unchanged since (blocking); False when none is in progress."""
    layout = _layout(checkout)
    return bool(present(layout.git_dir)) and _intact(layout)


def record_sync(checkout: Path) -> None:
    """:func:`record`, blocking (for a caller already in a worker thread)."""
    _record(_layout(checkout))


async def record(checkout: Path) -> None:
    """Remember the operation state of ``checkout`` as reverie's own, as a git of reverie's just
    left it (none left: the record goes)."""
    await blocking.run_sync("files", lambda: _record(_layout(checkout)))


async def intact(checkout: Path) -> bool:
    """Whether ``checkout``'s git folder holds exactly the operation state reverie recorded."""
    return await blocking.run_sync("files", lambda: _intact(_layout(checkout)))


async def drop(checkout: Path) -> tuple[str, ...]:
    """Remove the operation state of ``checkout`` without reading it (the names removed), and its
    record: what ``git rebase --quit`` does, without trusting what the state says."""
    return await blocking.run_sync("files", lambda: _drop(_layout(checkout)))


def settle(layout: Layout) -> tuple[str, ...]:
    """Remove an operation in progress from a main checkout unless reverie recorded it as its own
    and it is unchanged; a ``memory.warning`` finding names what went. Returns the names removed.
    Call with the repository's lock held (reverie's own operations there run under it)."""
    if layout.linked:
        return ()
    found = present(layout.git_dir)
    if not found:
        _record_path(layout).unlink(missing_ok=True)
        return ()
    if _intact(layout):
        return ()
    removed = _drop(layout)
    shown = ", ".join(f".git/{name}" for name in found)
    report(
        layout.top,
        f"{layout.top}: removed an operation in progress that reverie did not start ({shown}); nothing it "
        "names was run, and HEAD, the index and the branches were left as they are",
        restored=True,
    )
    return removed

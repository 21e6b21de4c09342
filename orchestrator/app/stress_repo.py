"""The repository a ``reverie stress`` run writes into, and the one way its writers commit.

Every commit is validated in-process first (the whole tree, with the MemFS validator) and made with
hooks bypassed (S21), so a writer never depends on the hook's process; what makes a commit safe to
count (shielded, checked against ``HEAD`` after a failed ``git commit``) is here, beside the files
it writes, and the booking of what was committed is :mod:`orchestrator.app.stress`'s.
"""

from __future__ import annotations

import errno
import os
from collections.abc import Callable
from contextlib import nullcontext
from functools import partial
from pathlib import Path

from anyio import CancelScope, sleep
from anyio import Path as AsyncPath

from orchestrator.base import blocking
from orchestrator.memfs.constraints import CONFIG_PATH
from orchestrator.memfs.errors import GitError
from orchestrator.memfs.history import commit_message
from orchestrator.memfs.hook import install_hook
from orchestrator.memfs.locks import merge_lock
from orchestrator.memfs.policy import APPROVAL_ENV, ROOT_MARKER
from orchestrator.memfs.provenance import Provenance, body
from orchestrator.memfs.repo import (
    DEFAULT_MEMORY_FILES,
    harness_commit_all,
    harness_commit_tracked,
    harness_init,
    harness_unstage,
)
from orchestrator.memfs.snapshot import build_snapshot
from orchestrator.memfs.validator import validate_snapshot

__all__ = [
    "COMMIT_RETRIES",
    "HOT_FILE",
    "commit",
    "init_repo",
    "initial_files",
    "note",
    "would_be_valid",
]

_STRESS = Provenance("stress")
"""What the stress writers' commits say of themselves (H1)."""

HOT_FILE = "notes/hot.md"
COMMIT_RETRIES = 200
"""Attempts at a commit (or a worktree) while git or a full disk refuses it."""
_PRESSURE_BUDGET = 1000


def note(name: str, body: str) -> str:
    """A memory file named ``name`` holding ``body``, with the frontmatter the validator asks for."""
    return f"---\nname: {name}\ndescription: stress test file {name}\n---\n{body}\n"


def initial_files(writers: int, limit_pressure: bool) -> dict[str, str]:
    """The run's first tree: a file per writer, the hot file, and with ``limit_pressure`` a core-memory
    budget that root files can break only together."""
    files = dict(DEFAULT_MEMORY_FILES)
    files["notes/MEMORY.md"] = "# Notes\n\nFiles written by `reverie stress`.\n"
    files[HOT_FILE] = note("hot", "initial")
    files["notes/main.md"] = note("main", "initial")
    for i in range(writers):
        files[f"notes/writer-{i:02d}.md"] = note(f"writer-{i:02d}", "initial")
    if limit_pressure:
        for i in range(writers):
            files[f"pressure-{i:02d}.md"] = note(f"pressure-{i:02d}", "")
        core = sum(len(text) for rel, text in files.items() if "/" not in rel and rel.endswith(".md"))
        files[CONFIG_PATH] = f'{{"version": 1, "maxCoreMemoryCharacters": {core + _PRESSURE_BUDGET}}}\n'
    return files


def _write_files(repo: Path, files: dict[str, str]) -> None:
    for rel, text in files.items():
        (repo / rel).parent.mkdir(parents=True, exist_ok=True)
        (repo / rel).write_text(text, encoding="utf-8")


async def init_repo(repo: Path, files: dict[str, str]) -> None:
    """A fresh v2 memory repo with the hook installed, committed with the harness identity.

    (``repo.init_memory_repo`` commits with the ambient git identity, which a bare machine lacks.)
    """
    await AsyncPath(repo).mkdir(parents=True)
    await harness_init(repo)
    await blocking.run_sync("files", partial(install_hook, repo, ROOT_MARKER))
    await blocking.run_sync("files", partial(_write_files, repo, files))
    snapshot = await blocking.run_sync("files", lambda: build_snapshot(_read_tree_files(repo)))
    errors = validate_snapshot(snapshot, ROOT_MARKER, {APPROVAL_ENV: "1"}).errors
    if errors:
        raise RuntimeError(f"stress repository would be invalid: {errors[0]}")
    await harness_commit_all(repo, "chore: initialize local memory", provenance=_STRESS)


def _read_tree_files(checkout: Path) -> dict[str, bytes]:
    """Every file of the working tree outside ``.git`` (blocking)."""
    files: dict[str, bytes] = {}
    for folder, dirs, names in os.walk(checkout):
        dirs[:] = [d for d in dirs if d != ".git"]
        for name in names:
            if name == ".git":
                continue
            path = Path(folder, name)
            files[path.relative_to(checkout).as_posix()] = path.read_bytes()
    return files


def would_be_valid(checkout: Path, rel: str, text: str) -> tuple[str, ...]:
    """Validate the whole tree with ``rel`` replaced by ``text``, before writing anything (blocking)."""
    before = _read_tree_files(checkout)
    after = {**before, rel: text.encode()}
    return validate_snapshot(build_snapshot(after, before), ROOT_MARKER).errors


async def commit(
    checkout: Path, rel: str, text: str, message: str, made: Callable[[str], None], *, lock: Path | None = None
) -> str:
    """Write and commit with hooks bypassed (one git process), hand the full id to ``made`` and
    return it.

    An attempt and ``made`` run shielded: a Ctrl-C that lands while git is committing would
    otherwise leave a commit on the branch that no figure of the summary counts (the equation's
    ``unmerged`` counts it from git, ``recorded`` never heard of it). A terminal's Ctrl-C reaches
    git too, and git may die of it *after* it moved the branch (while it prints its summary): the
    attempt then fails although the commit is made, so a failed attempt asks git whether ``HEAD``
    is this commit (:func:`_made_anyway`) before it counts as not made. Retried (backing off to 0.1 s)
    while git or the disk refuses: a full disk (``enospc``) is waited out. With ``lock`` each
    attempt holds that repository's lock and the wait between attempts does not, so a writer
    waiting for disk space never blocks the merge that frees it.
    """
    said = ""
    for attempt in range(COMMIT_RETRIES):
        async with merge_lock(lock) if lock is not None else nullcontext():
            with CancelScope(shield=True):
                sha, said = await _commit_once(checkout, rel, text, message)
                if sha is not None:
                    made(sha)
        if sha is not None:
            return sha
        await sleep(min(0.005 * (attempt + 1), 0.1))
    raise RuntimeError(f"stress commit {message!r} failed: {said}")


async def _commit_once(checkout: Path, rel: str, text: str, message: str) -> tuple[str | None, str]:
    try:
        await AsyncPath(checkout / rel).parent.mkdir(parents=True, exist_ok=True)
        await AsyncPath(checkout / rel).write_text(text, encoding="utf-8")
    except OSError as exc:
        if exc.errno != errno.ENOSPC:
            raise
        return None, str(exc)
    try:
        return await harness_commit_tracked(checkout, message, provenance=_STRESS), ""
    except GitError as error:
        return await _made_anyway(checkout, rel, message), error.stderr.strip() or str(error)


async def _made_anyway(checkout: Path, rel: str, message: str) -> str | None:
    """The commit a failed ``git commit`` made all the same (killed by a signal after it moved the
    branch), else None. Its ``HEAD`` is this commit when ``HEAD``'s message is ``message``: every
    stress commit's message is unique in its run, and nothing else moves this checkout's ``HEAD``
    during an attempt (a worktree is its writer's alone; the main writer holds the lock). git may
    have died before it wrote its index: ``rel``'s entry is reset to ``HEAD``'s, so the checkout is
    not left with a staged undo of the commit."""
    found = await blocking.run_sync("git", partial(commit_message, checkout))
    if found is None or body(found[1]).strip() != message:
        return None
    await harness_unstage(checkout, rel)
    return found[0]

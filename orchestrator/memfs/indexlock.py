"""Git's own ``index.lock`` under load (DECISIONS D1).

Inside reverie every index- or ref-writing command holds the repository lock, so git's
``index.lock`` (and ref ``.lock`` files) can only be contended by a process outside reverie: an
editor's git integration, a user's shell. Such contention is retried with tenacity
(:func:`retrying_git`). A *stale* ``index.lock`` (a git that died mid-write leaves it behind and
every later command refuses to run) is removed when it is older than 60 s and no live process has
it open per ``/proc/*/fd`` (git keeps the file open while it holds it), with a one-line notice.
"""

from __future__ import annotations

import os
import re
import sys
import time
from collections.abc import Callable, Mapping
from pathlib import Path

import anyio.to_thread

from orchestrator.memfs.git import GitError, GitResult, arun

__all__ = [
    "INDEX_LOCK_ATTEMPTS",
    "STALE_AFTER_SECONDS",
    "clear_stale_lock_files",
    "harness_git",
    "is_lock_contention",
    "lock_file_in",
    "open_by_live_process",
    "retrying_git",
]

STALE_AFTER_SECONDS = 60.0
INDEX_LOCK_ATTEMPTS = 12
_LOCKED = re.compile(r"Unable to create '([^']+\.lock)': File exists|cannot lock ref '[^']*': .*'([^']+\.lock)'")


async def harness_git(
    cwd: Path, *args: str, check: bool = True, env: Mapping[str, str] | None = None
) -> GitResult:
    """The seam's git for reverie's own repository work: harness identity, hooks bypassed (S21)."""
    return await arun(cwd, *args, check=check, env=env, harness=True)


def is_lock_contention(stderr: str) -> bool:
    """Whether git refused because another process holds one of its ``.lock`` files."""
    return _LOCKED.search(stderr) is not None or ("index.lock" in stderr and "File exists" in stderr)


def lock_file_in(stderr: str) -> Path | None:
    """The ``.lock`` file git named in its refusal, if any."""
    found = _LOCKED.search(stderr)
    if found is None:
        return None
    return Path(found.group(1) or found.group(2))


def open_by_live_process(path: Path) -> bool:
    """Whether any process we can see has ``path`` open (``/proc/*/fd``; blocking).

    Unreadable ``fd`` directories (other users' processes) are skipped: git refuses a lock file it
    cannot write anyway, and a memory repository belongs to one user.
    """
    try:
        target = os.stat(path)
    except FileNotFoundError:
        return False
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        fd_dir = f"/proc/{pid}/fd"
        try:
            fds = os.listdir(fd_dir)
        except OSError:
            continue
        for fd in fds:
            try:
                info = os.stat(f"{fd_dir}/{fd}")
            except OSError:
                continue
            if info.st_ino == target.st_ino and info.st_dev == target.st_dev:
                return True
    return False


def clear_stale_lock_files(
    paths: list[Path], *, now: float | None = None, notify: Callable[[str], None] | None = None
) -> list[Path]:
    """Remove each lock file that is stale by D1's rule; returns those removed (blocking)."""
    removed: list[Path] = []
    moment = time.time() if now is None else now
    for path in paths:
        try:
            age = moment - os.stat(path).st_mtime
        except FileNotFoundError:
            continue
        if age <= STALE_AFTER_SECONDS or open_by_live_process(path):
            continue
        try:
            path.unlink()
        except FileNotFoundError:
            continue
        removed.append(path)
        line = f"reverie: removed a stale {path} (left {age:.0f} s ago by a git process that is gone)"
        (notify or _stderr)(line)
    return removed


def _stderr(line: str) -> None:
    print(line, file=sys.stderr, flush=True)


def _locked(result: GitResult) -> bool:
    return not result.ok and is_lock_contention(result.stderr)


async def retrying_git(
    cwd: Path,
    *args: str,
    check: bool = True,
    env: Mapping[str, str] | None = None,
    attempts: int = INDEX_LOCK_ATTEMPTS,
) -> GitResult:
    """``run_git`` for a writing command: git's lock-file contention is retried (tenacity,
    exponential with jitter, about 10 s in all), and a stale lock file is removed on the way."""
    # lazy: tenacity is for writing commands, not for the reads of `chat -p` start-up
    from tenacity import AsyncRetrying, retry_if_result, stop_after_attempt, wait_exponential, wait_random

    result: GitResult | None = None
    async for attempt in AsyncRetrying(
        stop=stop_after_attempt(attempts),
        wait=wait_exponential(multiplier=0.02, max=2.0) + wait_random(0, 0.02),
        retry=retry_if_result(_locked),
        retry_error_callback=lambda _state: None,
    ):
        with attempt:
            result = await harness_git(cwd, *args, check=False, env=env)
            if _locked(result):
                named = lock_file_in(result.stderr)
                if named is not None:
                    await anyio.to_thread.run_sync(clear_stale_lock_files, [named])
        outcome = attempt.retry_state.outcome
        if outcome is not None and not outcome.failed:
            attempt.retry_state.set_result(result)
    assert result is not None
    if check and not result.ok:
        raise GitError(args, result.returncode, result.stderr, cwd)
    return result

"""Faults on purpose for ``reverie stress --faults`` (O9): kill, recover, go on.

The kills are real: the merger, a writer's commit or a lock holder runs as a child process
(:mod:`orchestrator.app.stress_child`) with ``REVERIE_FAULT`` naming the step it dies at
(:mod:`orchestrator.base.faults`), so the ``SIGKILL`` lands in the code path the product runs.
Recovery is the product's start-up recovery (:func:`orchestrator.memfs.recovery.recover`). One
fault at a time, under the harness's fault lock, so one recovery never mistakes another fault's
leftovers for its own. The kinds (``kill-merger``, ``kill-writer``, ``stale-lock``, ``enospc``) and
what counts as injected and recovered are in docs/architecture.md, "Stress faults"."""

from __future__ import annotations

import contextlib
import errno
import json
import os
import random
import signal
import subprocess
import sys
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from subprocess import CompletedProcess
from typing import Final

import anyio
from anyio import Path as AsyncPath
from anyio.abc import ByteReceiveStream, Process

from orchestrator.app.stress_child import STALE_LOCK_TEXT
from orchestrator.base import blocking
from orchestrator.base.errors import UsageError
from orchestrator.base.faults import kill_env
from orchestrator.base.processes import kill_session, pid_alive
from orchestrator.memfs.locks import common_dir_sync
from orchestrator.memfs.merge import FAULT_STEPS, MergeOutcome
from orchestrator.memfs.names import OWNER_FILE_NAME
from orchestrator.memfs.recovery import RecoveryReport, recover

__all__ = [
    "DISK_BYTES",
    "FAULT_KINDS",
    "FaultPlan",
    "FaultTally",
    "child_commit",
    "child_merge",
    "fill_disk",
    "inject_stale_lock",
    "parse_faults",
    "plan_faults",
    "recover_except",
    "small_disk",
]

FAULT_KINDS: Final = ("kill-merger", "kill-writer", "stale-lock", "enospc")
_WRITER_STEPS: Final = ("stress.commit.staged", "stress.commit.made")
DISK_BYTES: Final = 64 * 1024 * 1024
_MERGER_SHARE: Final = 0.2
_WRITER_SHARE: Final = 0.02
_LOCK_FAULTS: Final = 3
_DISK_FAULTS: Final = 3
_RECOVERY_ROUNDS: Final = 40


def parse_faults(text: str | None) -> tuple[str, ...]:
    """``kill-merger,stale-lock`` -> the kinds, in :data:`FAULT_KINDS` order; one-line error if unknown."""
    if not text:
        return ()
    kinds = [part.strip() for part in text.split(",") if part.strip()]
    unknown = [kind for kind in kinds if kind not in FAULT_KINDS]
    if unknown:
        raise UsageError(f"--faults: unknown fault {unknown[0]!r}; choose from {', '.join(FAULT_KINDS)}")
    return tuple(kind for kind in FAULT_KINDS if kind in kinds)


@dataclass(frozen=True)
class FaultPlan:
    """Where each fault is armed: ``(writer, batch) -> step``, ``(writer, commit) -> step``, and the
    batches before whose merge a lock holder dies. Drawn from the seed alone."""

    kinds: tuple[str, ...] = ()
    merges: dict[tuple[int, int], str] = field(default_factory=dict)
    commits: dict[tuple[int, int], str] = field(default_factory=dict)
    locks: frozenset[tuple[int, int]] = frozenset()
    disk_full: frozenset[tuple[int, int]] = frozenset()


def plan_faults(kinds: tuple[str, ...], seed: int, writers: int, commits: int, batch: int) -> FaultPlan:
    """A seeded plan: about a fifth of the merges, one commit in fifty, three lock holders and three
    full disks."""
    rng = random.Random(seed * 7_919 + 17)
    batches = [(w, b) for w in range(writers) for b in range(-(-commits // batch))]
    every = [(w, c) for w in range(writers) for c in range(commits)]
    merges: dict[tuple[int, int], str] = {}
    if "kill-merger" in kinds:
        chosen = rng.sample(batches, max(1, round(_MERGER_SHARE * len(batches))))
        merges = {key: FAULT_STEPS[n % len(FAULT_STEPS)] for n, key in enumerate(chosen)}
    planned: dict[tuple[int, int], str] = {}
    if "kill-writer" in kinds:
        chosen = rng.sample(every, max(1, round(_WRITER_SHARE * len(every))))
        planned = {key: _WRITER_STEPS[n % len(_WRITER_STEPS)] for n, key in enumerate(chosen)}
    locks: frozenset[tuple[int, int]] = frozenset()
    if "stale-lock" in kinds:
        locks = frozenset(rng.sample(batches, min(len(batches), _LOCK_FAULTS)))
    full: frozenset[tuple[int, int]] = frozenset()
    if "enospc" in kinds:
        free = [key for key in batches if key not in merges and key not in locks]
        full = frozenset(rng.sample(free, min(len(free), _DISK_FAULTS)))
    return FaultPlan(kinds, merges, planned, locks, full)


@dataclass
class FaultTally:
    """Faults injected and recovered, by kind (one event loop: no lock needed)."""

    injected: dict[str, int] = field(default_factory=dict)
    recovered: dict[str, int] = field(default_factory=dict)
    unrecovered: list[str] = field(default_factory=list)

    def hit(self, kind: str) -> None:
        self.injected[kind] = self.injected.get(kind, 0) + 1

    @property
    def open(self) -> int:
        """Faults injected whose recovery never finished (an interrupt cut it short)."""
        return sum(self.injected.values()) - sum(self.recovered.values()) - len(self.unrecovered)

    def settle(self, kind: str, problem: str | None) -> None:
        if problem is None:
            self.recovered[kind] = self.recovered.get(kind, 0) + 1
        else:
            self.unrecovered.append(f"{kind}: {problem}")


class _AllBut:
    """``active`` for recovery: every worktree id is a live run's except the dead one."""

    def __init__(self, dead: str | None) -> None:
        self.dead = dead

    def __contains__(self, item: object) -> bool:
        return item != self.dead

    def __iter__(self) -> Iterator[str]:
        return iter(())

    def __len__(self) -> int:
        return 0


async def recover_except(repo: Path, dead: str | None) -> RecoveryReport:
    """Start-up recovery with only ``dead``'s worktree (or none) treated as a dead run's."""
    return await recover(repo, active=_AllBut(dead))


def _killed(proc: CompletedProcess[bytes]) -> bool:
    return proc.returncode == -signal.SIGKILL


async def _child(args: list[str], step: str | None, stdin: bytes | None = None) -> CompletedProcess[bytes]:
    """The child's outcome. Its own session: a terminal's Ctrl-C is the harness's to handle (it
    stops the run and cancels this call), not a second, unplanned fault in the child; and a
    cancelled call kills that whole session (``kill_session``), the git the child was running
    included, which ``anyio.run_process`` (it kills the child alone) left writing in the repository
    the harness checks next. A child that died of its planned fault leaves its git as a crash would."""
    env = kill_env(step) if step is not None else None
    command = [sys.executable, "-m", "orchestrator.app.stress_child", *args]
    async with await anyio.open_process(
        command, stdin=subprocess.PIPE if stdin is not None else subprocess.DEVNULL,
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env, start_new_session=True,
    ) as process:
        try:
            out, err = await _communicate(process, stdin)
            code = await process.wait()
        except BaseException:
            with anyio.CancelScope(shield=True):
                await blocking.run_sync("wait", partial(kill_session, process.pid))
            raise
    return CompletedProcess(command, code, out, err)


async def _communicate(process: Process, stdin: bytes | None) -> tuple[bytes, bytes]:
    """Feed ``stdin`` and read both outputs to their end, concurrently (as ``run_process``)."""
    taken: dict[str, bytes] = {}

    async def drain(name: str, stream: ByteReceiveStream | None) -> None:
        chunks = [chunk async for chunk in stream] if stream is not None else []
        taken[name] = b"".join(chunks)

    async with anyio.create_task_group() as tg:
        tg.start_soon(drain, "out", process.stdout)
        tg.start_soon(drain, "err", process.stderr)
        if process.stdin is not None:
            async with process.stdin:
                if stdin:
                    await process.stdin.send(stdin)
    return taken["out"], taken["err"]


def _failed(what: str, proc: CompletedProcess[bytes]) -> RuntimeError:
    said = proc.stderr.decode(errors="replace").strip().splitlines()
    return RuntimeError(f"stress {what} child failed (exit {proc.returncode}): {said[-1] if said else 'no output'}")


async def child_merge(repo: Path, worktree: Path, branch: str, policy: str, step: str) -> MergeOutcome | None:
    """merge-back in a child armed to die at ``step``; its outcome, or None when it was killed."""
    proc = await _child(["merge", str(repo), str(worktree), branch, policy], step)
    if _killed(proc):
        return None
    if proc.returncode != 0:
        raise _failed("merge", proc)
    data = json.loads(proc.stdout)
    return MergeOutcome(
        data["status"], data["reason"], branch, tuple(data["commits"]), tuple(data["files"]), data["new_head"],
        tuple((old, new) for old, new in data["rewritten"]), reason_code=data["reason_code"], retried=data["retried"],
    )


async def child_commit(checkout: Path, rel: str, message: str, text: str, step: str) -> str | None:
    """A writer's commit in a child armed to die at ``step``; the commit id, or None when killed."""
    proc = await _child(["commit", str(checkout), rel, message], step, text.encode())
    if _killed(proc):
        return None
    if proc.returncode != 0:
        raise _failed("commit", proc)
    return proc.stdout.decode().strip()


async def inject_stale_lock(repo: Path) -> str | None:
    """A lock holder killed with the locks held, then recovery; None when recovered, else why not."""
    proc = await _child(["hold-lock", str(repo)], "stress.lock.held")
    if not _killed(proc):
        raise _failed("hold-lock", proc)
    common = await blocking.run_sync("git", partial(common_dir_sync, repo))
    lock = AsyncPath(common / "index.lock")
    for attempt in range(_RECOVERY_ROUNDS):
        await recover_except(repo, None)
        with contextlib.suppress(FileNotFoundError):
            # A live git's own lock may be there by now; only the dead holder's counts.
            if await lock.read_bytes() == STALE_LOCK_TEXT:
                # Recovery keeps every lock while a git works in the checkout (a detached
                # `git gc --auto` among them): the next start-up's recovery removes it.
                if attempt < _RECOVERY_ROUNDS - 1:
                    await anyio.sleep(0.05 * (attempt + 1))
                    continue
                return f"the stale index.lock is still there after {_RECOVERY_ROUNDS} recoveries"
        break
    try:
        # A live holder writes and removes its record all the time: gone by now is fine.
        record = await AsyncPath(common / OWNER_FILE_NAME).read_text()
    except FileNotFoundError:
        return None
    except OSError as error:
        return f"the lock owner record cannot be read ({error.strerror})"
    try:
        pid = int(json.loads(record)["pid"])
    except (ValueError, KeyError, TypeError):
        return "an unreadable lock owner record is left"
    if not pid_alive(pid):
        return f"the dead holder's owner record (pid {pid}) is still there"
    return None


# -- a small disk ---------------------------------------------------------------------------------


def _mount(path: Path) -> str | None:
    """Mount a :data:`DISK_BYTES` tmpfs at ``path``; None, or why not (blocking)."""
    if os.geteuid() != 0:
        return "skipped: a full disk needs a small tmpfs, and mounting one needs root"
    path.mkdir(parents=True, exist_ok=True)
    done = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", f"size={DISK_BYTES}", "tmpfs", str(path)], capture_output=True, text=True
    )
    if done.returncode != 0:
        said = done.stderr.strip().splitlines()
        return f"skipped: mounting a tmpfs failed ({said[0] if said else f'exit {done.returncode}'})"
    return None


def _unmount(path: Path) -> None:
    """Unmount; while a process still works there (a detached ``git gc --auto`` the run's commits
    started), lazily: the mount goes at once, its memory when that process ends."""
    if subprocess.run(["umount", str(path)], capture_output=True, check=False).returncode != 0:
        subprocess.run(["umount", "-l", str(path)], capture_output=True, check=False)


@asynccontextmanager
async def small_disk(path: Path) -> AsyncIterator[str | None]:
    """A tmpfs at ``path`` for the run's lifetime (unmounted on any exit); yields None when mounted,
    else why not (the ``enospc`` kind is then skipped with that reason)."""
    why = await blocking.run_sync("files", partial(_mount, path))
    try:
        yield why
    finally:
        if why is None:
            with anyio.CancelScope(shield=True):
                await blocking.run_sync("files", partial(_unmount, path))


def fill_disk(root: Path) -> Path:
    """Take every free byte of ``root``'s file system with one file; its path (blocking)."""
    filler = root / "filler"
    fd = os.open(filler, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    try:
        for size in (1 << 20, 1 << 14, 1 << 8, 1):
            chunk = b"\0" * size
            while True:
                try:
                    os.write(fd, chunk)
                except OSError as exc:
                    if exc.errno != errno.ENOSPC:
                        raise
                    break
    finally:
        os.close(fd)
    return filler

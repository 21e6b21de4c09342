"""Helpers shared by several test modules (fixtures live in conftest.py)."""

from __future__ import annotations

import sys
import time
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from pathlib import Path

import anyio

from orchestrator.memfs.locks import LOCK_FILE_NAME, merge_lock


@asynccontextmanager
async def hold_merge_lock(repo: Path) -> AsyncIterator[None]:
    """Hold the repository's merge lock in another task, as a reflection merge would."""
    held, release = anyio.Event(), anyio.Event()

    async def holder() -> None:
        async with merge_lock(repo):
            held.set()
            await release.wait()

    async with anyio.create_task_group() as tg:
        tg.start_soon(holder)
        await held.wait()
        try:
            yield
        finally:
            release.set()


_HOLDER = """
import fcntl, os, sys
fd = os.open(sys.argv[1], os.O_RDWR | os.O_CREAT, 0o666)
fcntl.flock(fd, fcntl.LOCK_EX)
print("held", flush=True)
sys.stdin.readline()
"""

_NAMED_HOLDER = """
import sys
from pathlib import Path
from orchestrator.memfs.locks import merge_lock_sync
with merge_lock_sync(Path(sys.argv[1]), source=sys.argv[2]):
    print("held", flush=True)
    sys.stdin.readline()
"""


@asynccontextmanager
async def lock_held_elsewhere(repo: Path, source: str | None = None) -> AsyncIterator[int]:
    """Hold the repository's merge lock from another process (as another REPL's commit or merge
    would) until the block ends; entered once the child says it holds it, with its pid. With
    ``source`` the child holds it as reverie does, its owner record naming it; without, bare."""
    if source is None:
        command = [sys.executable, "-c", _HOLDER, str(repo / ".git" / LOCK_FILE_NAME)]
    else:
        command = [sys.executable, "-c", _NAMED_HOLDER, str(repo), source]
    async with await anyio.open_process(command) as child:
        assert child.stdout is not None and child.stdin is not None
        said = b""
        async for chunk in child.stdout:
            said += chunk
            if b"held" in said:
                break
        try:
            yield child.pid
        finally:
            await child.stdin.send(b"\n")
            await child.wait()


class SleepRecorder:
    """An injectable backoff wait that records the delays instead of sleeping."""

    def __init__(self) -> None:
        self.delays: list[float] = []

    async def __call__(self, seconds: float) -> None:
        self.delays.append(seconds)


def running_with(marker: str, program: str | None = None) -> list[int]:
    """Live host pids whose command line contains ``marker`` (pids printed inside the sandbox are
    its own namespace's, so tests look processes up by a unique argument instead). ``program``
    keeps only processes running that executable: bwrap's and bash's own command lines carry the
    marker too, long before the command they start is running."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            argv = (entry / "cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        cmdline = b" ".join(argv).decode("utf-8", "replace")
        if program is not None and Path(argv[0].decode("utf-8", "replace")).name != program:
            continue
        if marker in cmdline and pid_running(int(entry.name)):
            found.append(int(entry.name))
    return found


# How often a deadline wait looks again. The wait ends on the state, never on the clock: the
# deadline only turns a state that never comes into a loud failure.
POLL_SECONDS = 0.02


def holders(path: Path) -> list[tuple[int, str]]:
    """The processes that have ``path`` open, as ``(pid, command line)`` (a git wrapper waiting for a
    lock, a git holding it), found through ``/proc`` so bubblewrap's namespaces do not hide them."""
    target = path.stat()
    found: list[tuple[int, str]] = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            fds = list((entry / "fd").iterdir())
            cmdline = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode("utf-8", "replace")
        except OSError:
            continue
        for fd in fds:
            try:
                held = fd.stat()
            except OSError:
                continue
            if (held.st_dev, held.st_ino) == (target.st_dev, target.st_ino):
                found.append((int(entry.name), cmdline))
                break
    return found


def wait_until(ready: Callable[[], bool], *, timeout: float, what: str) -> None:
    """Block until ``ready()`` holds (a state another process reaches: a file, a process, a ref);
    fail naming ``what`` after ``timeout`` s, so a slow machine only ever makes a test slower."""
    deadline = time.monotonic() + timeout
    while not ready():
        if time.monotonic() > deadline:
            raise AssertionError(f"{what}: not reached within {timeout:g} s")
        time.sleep(POLL_SECONDS)  # the poll of a readiness wait: it ends on the state, not on the clock


def none_left_within(marker: str, seconds: float) -> bool:
    try:
        wait_until(lambda: not running_with(marker), timeout=seconds, what=f"processes with {marker!r} gone")
    except AssertionError:
        return False
    return True


def pid_running(pid: int) -> bool:
    """Alive and not a zombie (a killed child its parent has not reaped yet counts as gone)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] not in ("Z", "X")

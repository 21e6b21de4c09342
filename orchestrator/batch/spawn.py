"""How the multi-process executor's worker processes come to life, and the link the driver talks to
each one through (``WorkerLink``: bytes in, lines out, exit status, kill).

Forked where the platform allows (``prefork``, before the loop and its first thread, so a child
takes its first task without importing again), else spawned as ``python -m
orchestrator.batch.worker``; the same link either way. Each child runs in a session of its own, and
ending a worker kills that whole session, so no command its agents started writes into a task folder
after it is gone. Details in docs/architecture.md, "Worker processes"."""

from __future__ import annotations

import contextlib
import gc
import os
import signal
import socket
import subprocess
import sys
import threading
import time
import traceback
from abc import ABC, abstractmethod
from collections.abc import Mapping
from functools import partial
from typing import NoReturn

import anyio
from anyio.abc import ByteReceiveStream, Process, SocketStream

from orchestrator.base import blocking
from orchestrator.base.processes import kill_session
from orchestrator.batch.worker import serve_socket

__all__ = ["START_ENV", "ForkedLink", "WorkerLink", "can_fork", "prefork", "spawn"]

START_ENV = "REVERIE_WORKER_START"
"""``fork`` (the default where possible) or ``spawn``: how the local executor starts its workers."""


class WorkerLink(ABC):
    """One worker process as the driver sees it."""

    pid: int
    returncode: int | None = None
    """Popen's convention: the exit code, or minus the signal that killed it; None while it runs."""

    @abstractmethod
    async def output(self) -> ByteReceiveStream:
        """What the child writes (protocol lines)."""

    @abstractmethod
    async def send(self, data: bytes) -> None:
        """Raises ``anyio.BrokenResourceError``, ``anyio.ClosedResourceError`` or ``OSError`` once the
        child is gone."""

    @abstractmethod
    async def close_input(self) -> None:
        """The child reads the end of its input: it finishes what it holds and exits."""

    @abstractmethod
    async def wait(self) -> int:
        """Until the child has exited; its ``returncode``."""

    @abstractmethod
    async def aclose(self) -> None:
        """Kill the child if it still runs, reap it and let go of everything held for it."""

    def kill(self) -> None:
        """SIGKILL the child's process group (not yet what the child started in groups of their
        own: ``aclose`` ends those)."""
        if self.returncode is None:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(self.pid, signal.SIGKILL)

    async def _end_session(self) -> None:
        """Kill whatever is left in the child's session and wait until it is gone (shielded: a
        cancelled run still waits for its commands to end)."""
        with anyio.CancelScope(shield=True):
            await blocking.run_sync("wait", partial(kill_session, self.pid))


class _Spawned(WorkerLink):
    def __init__(self, process: Process) -> None:
        self._process = process
        self.pid = process.pid

    async def output(self) -> ByteReceiveStream:
        assert self._process.stdout is not None
        return self._process.stdout

    async def send(self, data: bytes) -> None:
        assert self._process.stdin is not None
        await self._process.stdin.send(data)

    async def close_input(self) -> None:
        assert self._process.stdin is not None
        await self._process.stdin.aclose()

    async def wait(self) -> int:
        code = await self._process.wait()
        self.returncode = code
        return code

    async def aclose(self) -> None:
        self.returncode = self._process.returncode
        self.kill()
        await self._end_session()
        await self._process.aclose()
        self.returncode = self._process.returncode


async def spawn(env: Mapping[str, str]) -> WorkerLink:
    """Start ``python -m orchestrator.batch.worker`` (the way that works anywhere)."""
    process = await anyio.open_process(
        [sys.executable, "-m", "orchestrator.batch.worker"],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=None, env=dict(env), start_new_session=True,
    )
    return _Spawned(process)


class ForkedLink(WorkerLink):
    def __init__(self, pid: int, sock: socket.socket, pidfd: int) -> None:
        self.pid = pid
        self._sock: socket.socket | None = sock
        self._pidfd = pidfd
        self._stream: SocketStream | None = None

    async def _connected(self) -> SocketStream:
        if self._stream is None:
            if self._sock is None:
                raise anyio.ClosedResourceError
            sock, self._sock = self._sock, None
            sock.setblocking(False)
            self._stream = await SocketStream.from_socket(sock)
        return self._stream

    async def output(self) -> ByteReceiveStream:
        return await self._connected()

    async def send(self, data: bytes) -> None:
        await (await self._connected()).send(data)

    async def close_input(self) -> None:
        await (await self._connected()).send_eof()

    def _reap(self, flags: int) -> bool:
        if self.returncode is None:
            pid, status = os.waitpid(self.pid, flags)
            if pid:
                self.returncode = os.waitstatus_to_exitcode(status)
        return self.returncode is not None

    async def wait(self) -> int:
        while not self._reap(os.WNOHANG):
            await anyio.wait_readable(self._pidfd)
        assert self.returncode is not None
        return self.returncode

    async def aclose(self) -> None:
        self.kill()
        try:
            # before the child is reaped: its pid, the session's id, cannot be handed out meanwhile
            await self._end_session()
            with anyio.CancelScope(shield=True):
                await self.wait()
                if self._stream is not None:
                    await self._stream.aclose()
        finally:
            self._close_pidfd()

    def release(self) -> None:
        """For a link no loop ever used (the run ended before it needed this worker): close its
        socket, so the child reads the end of its input and exits (killed after a grace period),
        and reap it."""
        if self._sock is not None:
            self._sock.close()
            self._sock = None
        deadline = time.monotonic() + _RELEASE_GRACE
        while self._pidfd >= 0 and not self._reap(os.WNOHANG):
            if time.monotonic() > deadline:
                self.kill()
                self._reap(0)
                break
            time.sleep(0.005)
        kill_session(self.pid)
        self._close_pidfd()

    def release_in_child(self) -> None:
        """In a later sibling: the earlier siblings' ends are not its to hold (an open copy would
        keep their input from ever ending)."""
        if self._sock is not None:
            self._sock.close()
            self._sock = None
        self._close_pidfd()

    def _close_pidfd(self) -> None:
        if self._pidfd >= 0:
            os.close(self._pidfd)
            self._pidfd = -1


_RELEASE_GRACE = 2.0


def _single_threaded() -> bool:
    if threading.active_count() != 1:
        return False
    try:
        return len(os.listdir("/proc/self/task")) == 1
    except OSError:
        return True


def can_fork() -> bool:
    """Whether ``prefork`` would fork now: asked for (not ``spawn``), possible on this platform, and
    this process has a single thread."""
    if os.environ.get(START_ENV, "fork").strip().lower() == "spawn":
        return False
    if not hasattr(os, "fork") or not hasattr(os, "pidfd_open"):
        return False
    try:
        os.close(os.pidfd_open(os.getpid()))
    except OSError:
        return False
    return _single_threaded()


def prefork(count: int) -> list[ForkedLink]:
    """Fork ``count`` workers now (call it before any event loop or thread starts); ``[]`` when
    ``can_fork`` says no, and the executor spawns its workers instead. The caller owns the links:
    each ends with ``aclose`` on a loop, or ``ForkedLink.release`` without one."""
    if count <= 0 or not can_fork():
        return []
    # children then never scan the heap they inherit, nor dirty its pages doing so
    gc.freeze()
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(Exception):
            stream.flush()
    links: list[ForkedLink] = []
    for _ in range(count):
        ours, theirs = socket.socketpair()
        pid = os.fork()
        if pid == 0:
            ours.close()
            for link in links:
                link.release_in_child()
            _child(theirs)
        theirs.close()
        links.append(ForkedLink(pid, ours, os.pidfd_open(pid)))
    return links


def _child(sock: socket.socket) -> NoReturn:
    code = 1
    try:
        os.setsid()
        signal.signal(signal.SIGINT, signal.SIG_IGN)

        serve_socket(sock)
        code = 0
    except BaseException:
        with contextlib.suppress(Exception):
            traceback.print_exc()
    finally:
        with contextlib.suppress(Exception):
            sys.stderr.flush()
        os._exit(code)

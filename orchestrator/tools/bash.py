"""The ``bash`` tool: ``bash -c <command>`` in the workspace, stdout and stderr merged in order.

The command runs with the allowlisted environment, inside bubblewrap unless ``[tools] sandbox``
says otherwise (D11), in a process group that gets SIGKILL at the timeout or on cancellation. A
worker thread around ``subprocess.Popen`` rather than ``anyio.open_process``, because on asyncio the
latter forks on the event-loop thread. The session the group lives in, output collection, and why a
long command is fed through a pipe are in docs/architecture.md, "The bash tool"."""

from __future__ import annotations

import os
import select
import signal
import subprocess
import threading
from dataclasses import dataclass, field
from functools import partial

import anyio

from orchestrator.base import blocking
from orchestrator.tools.context import ToolContext, ToolResult
from orchestrator.tools.overflow import write_overflow
from orchestrator.tools.sandbox import (
    SandboxUnavailable,
    after_command,
    older_bubblewrap,
    plan_command,
    sandbox_refusal,
)
from orchestrator.tools.truncation import truncate_by_chars

__all__ = ["ARGV_COMMAND_BYTES", "run_bash"]

ARGV_COMMAND_BYTES = 64 * 1024

_MAX_COLLECT_BYTES = 16 * 1024 * 1024
_DRAIN_GRACE_SECONDS = 0.5
# SIGXFSZ ended the command (RLIMIT_FSIZE, sandbox.write_limit_bytes): bwrap's and bash's way of
# saying so, and the signal itself when nothing stands between it and Popen
_FILE_TOO_LARGE = (128 + signal.SIGXFSZ, -signal.SIGXFSZ)
_NO_SPACE = "No space left on device"
_TOO_LARGE = "File size limit exceeded"


@dataclass
class _Run:
    """A running command, shared with the thread that may have to kill it."""

    lock: threading.Lock = field(default_factory=threading.Lock)
    proc: subprocess.Popen[bytes] | None = None
    cancelled: bool = False

    def kill(self) -> None:
        with self.lock:
            self.cancelled = True
            proc = self.proc
        if proc is not None:
            _kill_group(proc)


@dataclass(frozen=True)
class _Outcome:
    """A finished command: its output (already bounded), exit status, and what was cut."""

    output: str
    returncode: int
    timed_out: bool
    dropped_bytes: int


def _kill_group(proc: subprocess.Popen[bytes]) -> None:
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass


def _own_session() -> bool:
    """Whether this process has a controlling terminal, which the command must then not share (see
    the module docstring). Asked on each call: a forked batch worker leaves the terminal's session
    after it was forked."""
    try:
        fd = os.open("/dev/tty", os.O_RDONLY | os.O_NOCTTY)
    except OSError:
        return False
    os.close(fd)
    return True


def _spawn(ctx: ToolContext, command: list[str], pass_fds: tuple[int, ...]) -> subprocess.Popen[bytes]:
    argv, env = plan_command(ctx, command)
    own_session = _own_session()
    return subprocess.Popen(
        argv,
        cwd=ctx.workspace,
        env=env,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        start_new_session=own_session,
        process_group=None if own_session else 0,
        pass_fds=pass_fds,
    )


def _feed(fd: int, script: bytes) -> None:
    """Write a long command into bash's script pipe; bash exiting early just ends the write."""
    try:
        view = memoryview(script)
        while view:
            view = view[os.write(fd, view) :]
    except OSError:
        pass
    finally:
        os.close(fd)


_SETUP_ATTEMPTS = 3
# how long a cancelled call waits for its killed command and the repository repairs after it
_SETTLE_SECONDS = 10.0


def _execute(command: str, ctx: ToolContext, timeout: float, run: _Run) -> _Outcome:
    """Run the command; started again, planned anew, when bubblewrap itself could not set up the
    sandbox (``bwrap: Can't …``, exit 1, before the command ran): a path it was to protect that git
    removed between the look-up and the mount (an empty ``.git/worktrees`` pruned as a background
    worktree goes) is not the command's failure, nor a bubblewrap before 0.8 that does not know
    ``--size`` (``sandbox.older_bubblewrap``). Bubblewrap that cannot run here at all is the
    one-line refusal (``sandbox_refusal``)."""
    attempt = 1
    while True:
        outcome = _execute_once(command, ctx, timeout, run)
        refusal = sandbox_refusal(ctx, outcome.returncode, outcome.output)
        if refusal is not None:
            raise refusal
        setup_failed = outcome.returncode == 1 and outcome.output.startswith("bwrap: Can't") and not outcome.timed_out
        setup_failed = setup_failed or older_bubblewrap(outcome.returncode, outcome.output)
        if not setup_failed or attempt == _SETUP_ATTEMPTS:
            return outcome
        with run.lock:
            if run.cancelled:
                return outcome
        attempt += 1


def _execute_once(command: str, ctx: ToolContext, timeout: float, run: _Run) -> _Outcome:
    # a batch task's workspace is made when its first command needs it (most tasks never run one)
    ctx.workspace.mkdir(parents=True, exist_ok=True)
    script = command.encode("utf-8", "surrogateescape")
    if len(script) <= ARGV_COMMAND_BYTES:
        proc = _spawn(ctx, ["bash", "-c", command], ())
    else:
        read_end, write_end = os.pipe()
        try:
            proc = _spawn(ctx, ["bash", f"/dev/fd/{read_end}"], (read_end,))
        except BaseException:
            os.close(write_end)
            raise
        finally:
            os.close(read_end)
        threading.Thread(target=_feed, args=(write_end, script), name="bash-script", daemon=True).start()
    with run.lock:
        run.proc = proc
        cancelled = run.cancelled
    if cancelled:
        _kill_group(proc)
    assert proc.stdout is not None
    stdout = proc.stdout
    chunks: list[bytes] = []
    kept = 0
    dropped = 0
    buffer_lock = threading.Lock()

    def reader() -> None:
        nonlocal kept, dropped
        fd = stdout.fileno()
        while True:
            try:
                data = os.read(fd, 65536)
            except OSError:
                break
            if not data:
                break
            with buffer_lock:
                if kept < _MAX_COLLECT_BYTES:
                    chunks.append(data)
                    kept += len(data)
                else:
                    dropped += len(data)

    thread = threading.Thread(target=reader, name="bash-output", daemon=True)
    thread.start()
    timed_out = False
    try:
        returncode = _wait(proc, timeout)
    except subprocess.TimeoutExpired:
        timed_out = True
        _kill_group(proc)
        returncode = proc.wait()
    thread.join(_DRAIN_GRACE_SECONDS)
    with buffer_lock:
        data = b"".join(chunks)
        lost = dropped
    if not thread.is_alive():
        stdout.close()
    return _Outcome(data.decode("utf-8", errors="replace"), returncode, timed_out, lost)


def _wait(proc: subprocess.Popen[bytes], timeout: float) -> int:
    """``proc.wait(timeout)`` woken by the exit itself: ``Popen.wait`` with a timeout polls, sleeping
    up to 50 ms between looks, and that sleep was on every tool call's path to the next request.
    A process file descriptor becomes readable when the process ends (Linux 5.3+; elsewhere, the
    poll)."""
    try:
        pidfd = os.pidfd_open(proc.pid)
    except (AttributeError, OSError):
        return proc.wait(timeout=timeout)
    try:
        poller = select.poll()
        poller.register(pidfd, select.POLLIN)
        if not poller.poll(min(max(0.0, timeout) * 1000, 2**31 - 1)):
            raise subprocess.TimeoutExpired(proc.args, timeout)
    finally:
        os.close(pidfd)
    return proc.wait()


def _render(outcome: _Outcome, ctx: ToolContext, timeout: float) -> ToolResult:
    text = outcome.output.rstrip("\n")
    if outcome.dropped_bytes:
        text += f"\n[{outcome.dropped_bytes:,} more bytes of output were discarded]"
    overflow = None
    if len(text) > ctx.output_cap and ctx.overflow_dir is not None:
        overflow = write_overflow(ctx.overflow_dir, "bash", text)
    shown = truncate_by_chars(text, ctx.output_cap, middle=ctx.middle_truncate, overflow_path=overflow)
    if outcome.timed_out:
        head = f"Command timed out after {timeout:g} seconds; its process group was killed."
        return ToolResult(False, f"{head}\n{shown}" if shown else head)
    note = _limit_note(outcome, ctx)
    if outcome.returncode != 0:
        if note is not None and outcome.returncode in _FILE_TOO_LARGE:
            head = f"Command stopped: {note}"
        else:
            head = f"Command failed with exit code {outcome.returncode}." + (f" Note: {note}" if note else "")
        return ToolResult(False, f"{head}\n{shown}" if shown else head)
    return ToolResult(True, f"Note: {note}\n{shown}" if note else shown)


def _limit_note(outcome: _Outcome, ctx: ToolContext) -> str | None:
    """What to tell the model when the command ran into ``[tools] write_limit_mb``: a file cut at
    the limit (SIGXFSZ), or a full private ``/tmp`` (a full disk reads the same; the note says where
    the room is)."""
    if outcome.returncode in _FILE_TOO_LARGE or _TOO_LARGE in outcome.output:
        return (
            f"a file was cut at the write limit, {ctx.write_limit_mb:,} MiB per file ([tools] write_limit_mb), "
            "and the process writing it was stopped."
        )
    if ctx.sandbox != "off" and _NO_SPACE in outcome.output:
        return (
            f"the sandbox's private /tmp and /dev/shm hold {ctx.write_limit_mb:,} MiB each "
            "([tools] write_limit_mb); write large files into the workspace."
        )
    return None


async def run_bash(command: str, ctx: ToolContext, *, time_limit: float | None = None) -> ToolResult:
    """Run ``command``; a non-zero exit or a timeout is an error result carrying the output."""
    limit = ctx.bash_timeout if time_limit is None else time_limit
    run = _Run()

    settled = threading.Event()

    def work() -> ToolResult:
        try:
            try:
                outcome = _execute(command, ctx, limit, run)
            except SandboxUnavailable as exc:
                return ToolResult(False, str(exc))
            finally:
                after_command(ctx)
        finally:
            settled.set()
        return _render(outcome, ctx, limit)

    try:
        return await blocking.run_sync("wait", partial(work))
    except anyio.get_cancelled_exc_class():
        run.kill()
        # The killed group's last writes and after_command's repairs (stale locks removed, an index
        # rebuilt) end before the caller moves on: a cancelled batch task's folder is removed and
        # made again by --resume, and a repair landing in it meanwhile left it half removed.
        with anyio.CancelScope(shield=True):
            await blocking.run_sync("wait", partial(settled.wait, _SETTLE_SECONDS))
        raise

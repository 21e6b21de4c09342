"""The bash tool with real processes: environment, cwd, exit codes, timeouts, output cap, cancellation."""

from __future__ import annotations

import contextlib
import dataclasses
import os
import signal
import subprocess
import sys
from functools import partial
from pathlib import Path

import anyio
import pytest
from anyio import Path as AsyncPath

from orchestrator.base.processes import kill_session
from orchestrator.tools import ToolContext, run_bash, run_tool
from tests.support import none_left_within, running_with, wait_until

pytestmark = pytest.mark.anyio


def _ctx(tmp_path: Path, **kw: object) -> ToolContext:
    ws = tmp_path / "ws"
    mem = tmp_path / "mem"
    ws.mkdir(exist_ok=True)
    mem.mkdir(exist_ok=True)
    return ToolContext(
        workspace=ws,
        memory_dir=mem,
        agent_id="agent-1",
        agent_name="Ada",
        conversation_id="conv-9",
        **kw,  # type: ignore[arg-type]
    )


SANDBOX_MODES = pytest.mark.parametrize("sandbox", ["bwrap", "off"])


async def test_env_and_cwd(tmp_path: Path) -> None:
    ctx = _ctx(tmp_path)
    result = await run_bash('pwd; echo "$MEMORY_DIR|$AGENT_ID|$AGENT_NAME|$CONVERSATION_ID"', ctx)
    assert result.ok
    cwd, env = result.output.split("\n")
    real = await anyio.to_thread.run_sync(os.path.realpath, cwd)
    assert real == await anyio.to_thread.run_sync(os.path.realpath, ctx.workspace)
    assert env == f"{ctx.memory_dir}|agent-1|Ada|conv-9"


@SANDBOX_MODES
async def test_a_missing_workspace_is_made_for_the_first_command(tmp_path: Path, sandbox: str) -> None:
    ctx = _ctx(tmp_path, sandbox=sandbox)
    fresh = dataclasses.replace(ctx, workspace=tmp_path / "later" / "ws")
    result = await run_bash("pwd; touch made-here", fresh)
    assert result.ok, result.output
    real = await anyio.to_thread.run_sync(os.path.realpath, result.output.strip())
    assert real == await anyio.to_thread.run_sync(os.path.realpath, fresh.workspace)
    assert await AsyncPath(fresh.workspace / "made-here").is_file()


async def test_stdout_and_stderr_merged_in_order(tmp_path: Path) -> None:
    result = await run_bash("echo a; echo b >&2; echo c", _ctx(tmp_path))
    assert result.ok and result.output == "a\nb\nc"


async def test_nonzero_exit_is_error_with_output(tmp_path: Path) -> None:
    result = await run_bash("echo oops >&2; exit 3", _ctx(tmp_path))
    assert not result.ok
    assert result.output == "Command failed with exit code 3.\noops"


# These two find their sleeps by a fixed argument ("30.031" matches both): under make unit's parallel
# run every variant of both runs on one worker, one after the other.
@pytest.mark.xdist_group("sleep-30.031")
@SANDBOX_MODES
async def test_timeout_kills_the_process_group(tmp_path: Path, sandbox: str) -> None:
    ctx = _ctx(tmp_path, bash_timeout=0.5, sandbox=sandbox)
    started = anyio.current_time()
    result = await run_bash("sleep 30.0311 & echo started; wait", ctx)
    assert anyio.current_time() - started < 10
    assert not result.ok
    assert result.output.startswith("Command timed out after 0.5 seconds; its process group was killed.")
    assert "started" in result.output
    assert await anyio.to_thread.run_sync(none_left_within, "30.0311", 2.0)


@SANDBOX_MODES
async def test_background_job_holding_the_pipe_does_not_hold_the_tool(tmp_path: Path, sandbox: str) -> None:
    started = anyio.current_time()
    result = await run_bash("(sleep 3 &) ; echo done", _ctx(tmp_path, sandbox=sandbox))
    assert result.ok and result.output == "done"
    assert anyio.current_time() - started < 2.5


async def test_output_cap_with_overflow_file(tmp_path: Path) -> None:
    ctx = _ctx(tmp_path, output_cap=100, overflow_dir=tmp_path / "overflow")
    result = await run_bash("python3 -c 'print(\"x\" * 1000)'", ctx)
    assert result.ok
    assert "\n... [900 characters omitted] ...\n" in result.output
    assert "[Output truncated: showing 100 of 1,000 characters.]\n[Full output written to: " in result.output
    path = result.output.rsplit("[Full output written to: ", 1)[1].rstrip("]")
    assert Path(path).name.startswith("bash-")
    assert await AsyncPath(path).read_text() == "x" * 1000


@pytest.mark.xdist_group("sleep-30.031")
@SANDBOX_MODES
async def test_cancellation_kills_the_command(tmp_path: Path, sandbox: str) -> None:
    ctx = _ctx(tmp_path, sandbox=sandbox)
    scope = anyio.CancelScope()

    async def command() -> None:
        with scope:
            await run_bash("sleep 30.0312 & echo $$ > shell.pid; sleep 30.0313", ctx)

    async with anyio.create_task_group() as tg:
        tg.start_soon(command)
        await anyio.to_thread.run_sync(
            partial(wait_until, lambda: bool(running_with("30.0313", program="sleep")), timeout=120, what="the command's sleep")
        )
        scope.cancel()
    assert await AsyncPath(ctx.workspace / "shell.pid").exists()
    assert await anyio.to_thread.run_sync(none_left_within, "30.031", 5.0)


async def test_model_timeout_argument(tmp_path: Path) -> None:
    ctx = _ctx(tmp_path)
    result = await run_tool("bash", '{"command": "sleep 5", "timeout": 0.3}', ctx)
    assert not result.ok  # 0.3 is not an integer
    assert 'argument "timeout" must be integer' in result.output
    result = await run_tool("bash", '{"command": "echo hi", "timeout": 0}', ctx)
    assert not result.ok and "timeout must be a positive" in result.output
    result = await run_tool("bash", '{"command": "sleep 5", "timeout": 1}', ctx)
    assert not result.ok and "timed out after 1 seconds" in result.output


@SANDBOX_MODES
async def test_a_command_of_any_length_runs_and_reads_no_stdin(tmp_path: Path, sandbox: str) -> None:
    """A8: a 300 KB command (over Linux's 128 KiB per argument) runs whole, in the
    sandbox too; a command inside it that reads stdin sees /dev/null, not the rest of the script."""
    ctx = _ctx(tmp_path, sandbox=sandbox)
    payload = "z" * 300_000
    command = f"cat > big.txt <<'EOF'\n{payload}\nEOF\nwc -c < big.txt\ncat; echo \"stdin-read:$?\"\necho last-line"
    assert len(command.encode()) > 2 * 128 * 1024
    result = await run_bash(command, ctx)
    assert result.ok, result.output[:300]
    assert result.output.split("\n") == ["300001", "stdin-read:0", "last-line"]
    assert await AsyncPath(ctx.workspace / "big.txt").read_text() == payload + "\n"


async def test_a_long_command_that_fails_reports_its_exit_code(tmp_path: Path) -> None:
    result = await run_bash("#" + "x" * 200_000 + "\necho half; exit 4\necho never", _ctx(tmp_path))
    assert not result.ok and result.output == "Command failed with exit code 4.\nhalf"


# Runs one command from a process that leads a session without a terminal (as a batch worker does)
# or with one (pty.fork: as an interactive chat does), writes that process's pid first.
_SESSION_RUNNER = """
import os, pty, sys
from pathlib import Path
import anyio
from orchestrator.tools import ToolContext, run_bash

mode, sandbox, ws, seconds, pid_file = sys.argv[1:6]

def run():
    Path(pid_file + ".tmp").write_text(str(os.getpid()))
    os.rename(pid_file + ".tmp", pid_file)
    ctx = ToolContext(workspace=Path(ws), memory_dir=None, agent_id="a", agent_name="A", conversation_id="c",
                      sandbox=sandbox)
    anyio.run(run_bash, f"sleep {seconds}", ctx)

if mode == "terminal":
    pid, fd = pty.fork()
    if pid == 0:
        run()
        os._exit(0)
    while True:
        try:
            if not os.read(fd, 1024):
                break
        except OSError:
            break
    os.waitpid(pid, 0)
else:
    os.setsid()
    run()
"""


@pytest.mark.parametrize("mode", ["no-terminal", "terminal"])
@SANDBOX_MODES
def test_a_command_shares_the_session_of_a_process_without_a_terminal(tmp_path: Path, sandbox: str, mode: str) -> None:
    """Without a terminal (a batch worker) the command is in the caller's session, so the driver's
    session kill reaches it, sandboxed or not; with one (an interactive chat) it is in a session of
    its own, away from the terminal. Either way it leads a process group of its own (the timeout's
    kill)."""
    seconds = f"30.0{os.getpid() % 1000:03d}{len(mode)}{len(sandbox)}"
    pid_file = tmp_path / "runner.pid"
    argv = [sys.executable, "-c", _SESSION_RUNNER, mode, sandbox, str(tmp_path), seconds, str(pid_file)]
    errors = tmp_path / "runner.err"
    with errors.open("wb") as sink:
        child = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=sink)

    def running() -> bool:
        assert child.poll() is None, errors.read_text()
        return pid_file.exists() and bool(running_with(seconds, program="sleep"))

    try:
        wait_until(running, timeout=120, what="the command's sleep")
        runner = int(pid_file.read_text())
        (sleeper,) = running_with(seconds, program="sleep")
        pgid, sid = (int(x) for x in Path(f"/proc/{sleeper}/stat").read_text().rsplit(")", 1)[1].split()[2:4])
        if mode == "no-terminal":
            assert runner == child.pid and sid == runner, "the command is in the worker's session"
            assert pgid != runner, "in a process group of its own"
        else:
            assert sid not in (runner, child.pid) and pgid == sid, "in a session of its own, away from the terminal"
    finally:
        for pid in running_with(seconds):
            with contextlib.suppress(ProcessLookupError):  # gone with the sandbox killed before it
                os.kill(pid, signal.SIGKILL)
        kill_session(child.pid)
        child.wait()

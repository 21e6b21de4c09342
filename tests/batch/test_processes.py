"""The multi-process local executor with real worker processes: the same results as in-process,
every task run exactly once, cancellation and a killed worker leave no process and lose no result,
and ``--processes`` is checked on the command line."""

from __future__ import annotations

import contextlib
import json
import os
import shlex
import shutil
import signal
import subprocess
import sys
from collections import Counter
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import anyio
import pytest
import typer
from typer.testing import CliRunner

from orchestrator.base.errors import UsageError
from orchestrator.batch.eventlog import read_events
from orchestrator.batch.executors import LocalExecutor, ProcessExecutor, auto_processes, make_executor
from orchestrator.batch.results import RESULTS_FILE, TaskResult
from orchestrator.batch.run import run_suite
from orchestrator.batch.runner import RunOptions
from orchestrator.batch.suite import Task, load_suite
from orchestrator.cli.batch import register
from tests.batch.helpers import EXPECTED, LAUNCH_CLI, TINY, write_suite
from tests.support import pid_running, wait_until

pytestmark = pytest.mark.anyio

ROOT = Path(__file__).resolve().parents[2]
_COPIES = 3


def _suite(tmp_path: Path, copies: int = _COPIES) -> list[Task]:
    """The example suite several times over (ids ``rule-0``...): enough work that the children,
    whose start-up the driver does not wait for, get a share of it."""
    tasks = [{**t, "id": f"{t['id']}-{k}"} for k in range(copies) for t in TINY]
    return load_suite(write_suite(tmp_path / "s.jsonl", tasks))


def _plain(results: Mapping[str, TaskResult]) -> dict[str, tuple[str, tuple[Any, ...], int, int]]:
    return {r.id: (r.status, r.checks, r.turns, r.checks_passed) for r in results.values()}


def _recorded(out: Path) -> list[TaskResult]:
    return [TaskResult.from_json(json.loads(line)) for line in (out / RESULTS_FILE).read_text().splitlines()]


def _starts(out: Path, task_id: str) -> list[dict[str, Any]]:
    return [dict(r.payload) for r in read_events(out, task=task_id) if r.kind == "task.start"]


def _workers_of(parent: int) -> list[int]:
    """Live processes started from ``parent`` running the worker module (a /proc scan)."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text().rsplit(")", 1)[1].split()
            cmdline = (entry / "cmdline").read_bytes()
        except OSError:
            continue
        if int(stat[1]) == parent and b"orchestrator.batch.worker" in cmdline and stat[0] != "Z":
            found.append(int(entry.name))
    return found


async def test_results_equal_an_in_process_run_and_each_task_runs_once(tmp_path: Path) -> None:
    tasks = await anyio.to_thread.run_sync(_suite, tmp_path)
    alone = tmp_path / "alone"
    await run_suite(tasks, RunOptions(out_dir=alone, latency=0.05), LocalExecutor(3))
    spread = tmp_path / "spread"
    executor = ProcessExecutor(3, processes=3)
    events: Counter[str] = Counter()

    async def progress(task_id: str, kind: str, payload: object) -> None:
        events[kind] += 1

    report = await run_suite(tasks, RunOptions(out_dir=spread, latency=0.05), executor, progress=progress)
    assert len(executor.pids) == 2
    expected = {f"{name}-{k}": status for k in range(_COPIES) for name, status in EXPECTED.items()}
    assert report.summary["statuses"] == expected
    one, other = await anyio.to_thread.run_sync(_recorded, alone), await anyio.to_thread.run_sync(_recorded, spread)
    assert _plain({r.id: r for r in other}) == _plain({r.id: r for r in one})
    assert sorted(r.id for r in other) == sorted(expected), "one result per task"
    # Who ran what is the scheduler's choice: a child that starts slowly (load 20-30) leaves the
    # whole suite to the driver, by design. That children do run tasks is the next test's readiness
    # wait (a task.start from another pid); here every task ran in one of this run's processes.
    ran_by = Counter(r.worker_pid for r in other)
    assert set(ran_by) <= {os.getpid(), *executor.pids}, f"tasks ran outside the run's processes: {ran_by}"
    for result in other:
        starts = await anyio.to_thread.run_sync(_starts, spread, result.id)
        assert [s["pid"] for s in starts] == [result.worker_pid], result.id
    assert events["task.start"] == len(tasks) and events["model.call"] > 0, "children's progress reached the driver"
    assert not any(pid_running(pid) for pid in executor.pids)


async def test_cancelling_stops_the_children_and_resume_runs_only_the_rest(tmp_path: Path) -> None:
    tasks = await anyio.to_thread.run_sync(_suite, tmp_path, 4)
    out = tmp_path / "out"
    options = RunOptions(out_dir=out, latency=0.2)
    executor = ProcessExecutor(4, processes=2)
    seen: list[str] = []
    started_in_child = anyio.Event()

    async def progress(task_id: str, kind: str, payload: Mapping[str, Any]) -> None:
        if kind == "task.start" and payload.get("pid") != os.getpid():
            started_in_child.set()

    with anyio.CancelScope() as scope:

        async def on_result(result: TaskResult) -> None:
            seen.append(result.id)
            if len(seen) >= 3 and started_in_child.is_set():
                scope.cancel()

        with anyio.fail_after(120):
            await run_suite(tasks, options, executor, progress=progress, on_result=on_result)
    assert scope.cancelled_caught
    assert executor.pids and not any(pid_running(pid) for pid in executor.pids)
    assert _workers_of(os.getpid()) == []
    recorded = await anyio.to_thread.run_sync(_recorded, out)
    assert sorted(r.id for r in recorded) == sorted(seen) and len(seen) < len(tasks)

    report = await run_suite(tasks, options, ProcessExecutor(4, processes=2), resume=True)
    assert sorted(report.skipped) == sorted(seen)
    assert sorted(report.ran) == sorted({t.id for t in tasks} - set(seen))
    final = await anyio.to_thread.run_sync(_recorded, out)
    assert sorted(r.id for r in final) == sorted(t.id for t in tasks), "every task recorded exactly once"
    for task in tasks:
        assert len(await anyio.to_thread.run_sync(_starts, out, task.id)) == 1, task.id
    assert report.summary["statuses"] == {
        f"{name}-{k}": status for k in range(4) for name, status in EXPECTED.items()
    }


async def test_a_killed_worker_turns_its_tasks_into_errors_and_the_run_goes_on(tmp_path: Path) -> None:
    tasks = await anyio.to_thread.run_sync(_suite, tmp_path, 4)
    out = tmp_path / "out"
    executor = ProcessExecutor(4, processes=2)
    killed: list[int] = []

    async def progress(task_id: str, kind: str, payload: Mapping[str, Any]) -> None:
        pid = payload.get("pid")
        if kind == "task.start" and isinstance(pid, int) and pid != os.getpid() and not killed:
            killed.append(pid)
            os.kill(pid, signal.SIGKILL)

    with anyio.fail_after(120):
        report = await run_suite(tasks, RunOptions(out_dir=out, latency=0.2), executor, progress=progress)
    assert killed
    recorded = await anyio.to_thread.run_sync(_recorded, out)
    assert sorted(r.id for r in recorded) == sorted(t.id for t in tasks), "every task has exactly one result"
    lost = [r for r in recorded if r.worker_pid == killed[0]]
    assert lost and all(r.status == "error" for r in lost)
    assert all(f"batch worker process {killed[0]} was killed by SIGKILL" in (r.error or "") for r in lost)
    others = {r.id: r.status for r in recorded if r.worker_pid != killed[0]}
    assert all(status == EXPECTED[task_id.rsplit("-", 1)[0]] for task_id, status in others.items())
    assert report.summary["error"] == len(lost)
    assert not any(pid_running(pid) for pid in executor.pids)


def test_the_worker_speaks_only_the_protocol_on_stdout_and_reports_on_stderr(tmp_path: Path) -> None:
    def worker(data: bytes) -> subprocess.CompletedProcess[bytes]:
        return subprocess.run(
            [sys.executable, "-m", "orchestrator.batch.worker"], input=data, capture_output=True,
            cwd=ROOT, env=dict(os.environ), timeout=60,
        )

    header = {"options": RunOptions(out_dir=tmp_path / "out").to_json(), "progress": True}
    idle = worker(json.dumps(header).encode() + b"\n")
    assert idle.returncode == 0, idle.stderr.decode()
    assert [json.loads(line) for line in idle.stdout.splitlines()] == [{"ready": json.loads(idle.stdout)["ready"]}]
    broken = worker(b"not json\n")
    assert broken.returncode != 0 and broken.stdout == b""
    assert b"JSONDecodeError" in broken.stderr


def test_auto_keeps_small_runs_in_process() -> None:
    cores = os.cpu_count() or 1
    assert auto_processes(1, 1000) == 1
    assert auto_processes(15, 1000) == 1
    assert auto_processes(64, 4) == 1
    assert auto_processes(64, 64) == min(cores, 4)
    assert auto_processes(4096, 4096) == cores
    assert isinstance(make_executor("local", 4, processes=1), LocalExecutor)
    assert isinstance(make_executor("local", 4, processes=None), ProcessExecutor)
    with pytest.raises(UsageError, match="needs --concurrency 3"):
        make_executor("local", 2, processes=3)


@pytest.mark.parametrize(
    ("value", "says"),
    [("0", "at least 1"), ("-2", "at least 1"), ("many", "use auto or a whole number"), ("3", "needs --concurrency 3")],
)
def test_bad_processes_values_are_one_line(tmp_path: Path, value: str, says: str) -> None:
    app = typer.Typer()
    register(app)
    suite = write_suite(tmp_path / "s.jsonl")
    result = CliRunner().invoke(app, ["run", str(suite), "--out", str(tmp_path / "o"), "-q", "-j", "2", "--processes", value])
    assert result.exit_code != 0
    lines = [line for line in result.output.splitlines() if line.strip()]
    assert len(lines) == 1 and says in lines[0] and "--processes" in lines[0], result.output
    assert "Traceback" not in result.output
    assert not (tmp_path / "o" / RESULTS_FILE).exists()




@pytest.mark.slow
def test_ctrl_c_on_a_multi_process_run_leaves_no_worker_and_resume_finishes_it(tmp_path: Path) -> None:
    """SIGINT reaches the driver only (the workers have their own session): exit 130 without a
    traceback from anyone, no worker left, and the printed command finishes the rest."""
    tasks = _suite(tmp_path, 4)
    suite = tmp_path / "s.jsonl"
    out = tmp_path / "out"
    proc = subprocess.Popen(
        [sys.executable, "-c", LAUNCH_CLI, "run", str(suite), "--out", str(out), "-q", "-j", "4", "--processes", "2",
         "--scripted-latency", "0.2"],
        cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=dict(os.environ),
    )
    children: set[int] = set()

    def workers_busy() -> bool:
        """Stopped early, or a worker process ran a task and two results are in."""
        nonlocal children
        if proc.poll() is not None:
            return True
        children = {s["pid"] for t in tasks for s in (_starts(out, t.id) if (out / "events").is_dir() else [])} - {proc.pid}
        results = out / RESULTS_FILE
        return bool(children) and results.exists() and results.read_text().count("\n") >= 2

    wait_until(workers_busy, timeout=120, what="two results, one from a worker process")
    assert children and proc.poll() is None, "a worker process ran a task before the run ended"
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 130, err.decode()
    assert b"Traceback" not in err, err.decode()
    assert not any(pid_running(pid) for pid in children)
    done = {json.loads(line)["id"] for line in (out / RESULTS_FILE).read_text().splitlines()}
    assert 2 <= len(done) < len(tasks)

    app = typer.Typer()
    register(app)
    # the hint is the last line naming --resume (a warning about a lock a killed git left may follow it)
    hint = shlex.split([line for line in err.decode().splitlines() if "--resume" in line][-1])
    assert "--processes" in hint
    result = CliRunner().invoke(app, hint[1:])
    assert result.exit_code == 1, result.output  # the suite's "wrong" tasks fail by design
    final = [json.loads(line) for line in (out / RESULTS_FILE).read_text().splitlines()]
    assert sorted(r["id"] for r in final) == sorted(t.id for t in tasks)
    assert {r["id"]: r["status"] for r in final} == {t.id: EXPECTED[t.id.rsplit("-", 1)[0]] for t in tasks}


_WINDOW_BWRAP = """#!/bin/sh
# bubblewrap's start-up window: it sets --die-with-parent only once running. Here it gets past
# that point only after the worker that started it is gone (re-parented: the parent is not $parent).
parent=$PPID
: > {ready}/$parent
while [ "$(cut -d' ' -f4 /proc/$$/stat)" = "$parent" ]; do sleep 0.02; done
exec {real} "$@"
"""


def _looping_model(command: str) -> Any:
    """The loopback model: every task's first request gets one bash call running ``command``."""
    from orchestrator.testing.openai_server import text_reply, tool_call_reply

    def reply(body: Any) -> Any:
        if body["messages"][-1].get("role") == "user":
            return tool_call_reply("bash", json.dumps({"command": command}))
        return text_reply("done")

    return reply


@pytest.mark.parametrize("sandbox", ["bwrap", "off", "bwrap-window"])
async def test_cancelling_kills_the_commands_a_worker_started(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, sandbox: str
) -> None:
    """A command a worker's agent runs keeps writing until it is killed. Cancelling the run kills
    it with its worker: unconfined (no parent-death signal at all), in the sandbox, and in the
    sandbox when the worker dies before bubblewrap is set up to die with it (``bwrap-window``: a
    ``bwrap`` on ``PATH`` that waits for its worker to be gone before it runs the real one).
    Nothing with the command's unique text is left running."""
    from orchestrator.testing.openai_server import LoopbackOpenAI
    from tests.support import running_with, wait_until

    marker = f"orphan-{os.getpid()}-{sandbox}"
    command = f"while :; do echo {marker} >> beat; sleep 0.02; done"
    ready = tmp_path / "window-ready"
    ready.mkdir()
    monkeypatch.setenv("REVERIE_SANDBOX", "off" if sandbox == "off" else "bwrap")
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test")
    if sandbox == "bwrap-window":
        real = shutil.which("bwrap")
        assert real is not None, "bubblewrap is installed on the machines the tests run on"
        fake = tmp_path / "bin"
        fake.mkdir()
        (fake / "bwrap").write_text(_WINDOW_BWRAP.format(real=shlex.quote(real), ready=shlex.quote(str(ready))))
        (fake / "bwrap").chmod(0o755)
        monkeypatch.setenv("PATH", f"{fake}:{os.environ['PATH']}")
    tasks = load_suite(write_suite(tmp_path / "s.jsonl", [
        {"id": f"loop-{k}", "turns": ["go"], "checks": [{"contains": "done"}], "settings": {"reflection_trigger": "off"}} for k in range(4)
    ]))
    out = tmp_path / "out"
    pids: dict[str, int] = {}

    async def progress(task_id: str, kind: str, payload: Mapping[str, Any]) -> None:
        if kind == "task.start" and isinstance(payload.get("pid"), int):
            pids[task_id] = payload["pid"]

    def in_a_child() -> bool:
        """A worker process's command is running (in the window: its bubblewrap is starting; a
        file named after the process that started it)."""
        if sandbox == "bwrap-window":
            return any(int(entry.name) != os.getpid() for entry in ready.iterdir())
        return any(pid != os.getpid() and (out / "work" / task / "beat").exists() for task, pid in dict(pids).items())

    with LoopbackOpenAI(fallback=_looping_model(command)) as server:
        monkeypatch.setenv("REVERIE_BASE_URL", server.base_url)
        monkeypatch.setenv("REVERIE_MODEL", "loopback-model")
        executor = ProcessExecutor(2, processes=2)
        try:
            with anyio.fail_after(180), anyio.CancelScope() as scope:
                async with anyio.create_task_group() as tg:

                    async def cancel_once_running() -> None:
                        await anyio.to_thread.run_sync(
                            lambda: wait_until(in_a_child, timeout=120, what="a worker's command running")
                        )
                        scope.cancel()

                    tg.start_soon(cancel_once_running)
                    await run_suite(tasks, RunOptions(out_dir=out), executor, progress=progress)
            assert scope.cancelled_caught
            assert executor.pids and not any(pid_running(pid) for pid in executor.pids)
            assert running_with(marker) == [], "a command outlived its cancelled worker"
        finally:
            for pid in running_with(marker):
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)

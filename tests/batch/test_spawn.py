"""Workers forked before the event loop: they run tasks with the same results as one process, a
killed one turns its tasks into errors, forking is refused while a thread runs, and unused ones are
reaped. Each case runs in a fresh interpreter (pytest's own process has threads, so it can only
spawn: the spawned path is tested in-process by test_processes.py)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from orchestrator.batch.results import RESULTS_FILE
from tests.batch.helpers import EXPECTED, TINY, write_suite

ROOT = Path(__file__).resolve().parents[2]

_RUN = r"""
import json, os, signal, sys
from pathlib import Path
import anyio
from orchestrator.batch.executors import ProcessExecutor
from orchestrator.batch.run import run_suite
from orchestrator.batch.runner import RunOptions
from orchestrator.batch.suite import load_suite

suite, out, mode = Path(sys.argv[1]), Path(sys.argv[2]), sys.argv[3]
tasks = load_suite(suite)
executor = ProcessExecutor(4, processes=2)
executor.prefork(len(tasks))
killed = []

async def progress(task_id, kind, payload):
    pid = payload.get("pid")
    if mode == "kill" and kind == "task.start" and isinstance(pid, int) and pid != os.getpid() and not killed:
        killed.append(pid)
        os.kill(pid, signal.SIGKILL)

async def main():
    return await run_suite(tasks, RunOptions(out_dir=out, latency=0.2), executor, progress=progress)

report = anyio.run(main, backend=os.environ.get("REVERIE_BACKEND", "trio"))
left = [pid for pid in executor.pids if os.path.exists(f"/proc/{pid}")]
print(json.dumps({"own": os.getpid(), "pids": executor.pids, "forked": executor.forked_pids, "killed": killed,
                  "statuses": report.summary["statuses"], "left": left}))
"""

_SWEEP = r"""
import json, os, sys
from pathlib import Path
import anyio
from orchestrator.batch.executors import ProcessExecutor
from orchestrator.batch.runner import RunOptions
from orchestrator.batch.suite import load_suite
from orchestrator.batch.sweep import expand_triggers, run_sweep

suite, out = Path(sys.argv[1]), Path(sys.argv[2])
tasks = load_suite(suite)
settings = expand_triggers(["off", "step-count:2"])
executor = ProcessExecutor(4, processes=2)
executor.prefork(len(tasks), runs=len(settings))
ready = [link.pid for link in executor._forked]
ran = []

async def done(setting, report):
    ran.append({"forked": list(executor.forked_pids), "pids": list(executor.pids),
                "statuses": report.summary["statuses"]})

async def main():
    await run_sweep(tasks, settings, RunOptions(out_dir=out, latency=0.2), lambda: executor, on_setting_done=done,
                    override_pinned=True)

anyio.run(main, backend="trio")
executor.release()
left = [pid for pid in ready if os.path.exists(f"/proc/{pid}")]
print(json.dumps({"ready": ready, "ran": ran, "left": left}))
"""

_REFUSE = r"""
import json, os, threading
from orchestrator.batch import spawn
before = spawn.can_fork()
links = spawn.prefork(2)
pids = [link.pid for link in links]
for link in links:
    link.release()
left = [pid for pid in pids if os.path.exists(f"/proc/{pid}")]
stop = threading.Event()
waiter = threading.Thread(target=stop.wait)
waiter.start()
during = spawn.can_fork(), spawn.prefork(1)
stop.set()
waiter.join()
print(json.dumps({"before": before, "pids": pids, "left": left, "during": during[0], "forked_during": len(during[1])}))
"""


def _suite(tmp_path: Path, copies: int) -> Path:
    tasks = [{**t, "id": f"{t['id']}-{k}"} for k in range(copies) for t in TINY]
    return write_suite(tmp_path / "s.jsonl", tasks)


def _python(code: str, *args: str, env: dict[str, str] | None = None) -> dict[str, Any]:
    done = subprocess.run(
        [sys.executable, "-c", code, *args], cwd=ROOT, capture_output=True, timeout=180,
        env={**os.environ, **(env or {})},
    )
    assert done.returncode == 0, done.stderr.decode()
    assert b"Traceback" not in done.stderr, done.stderr.decode()
    return dict(json.loads(done.stdout.decode().strip().splitlines()[-1]))


def _results(out: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in (out / RESULTS_FILE).read_text().splitlines()]


pytestmark = pytest.mark.skipif(not hasattr(os, "pidfd_open"), reason="forked workers need pidfds (Linux)")


@pytest.mark.parametrize("backend", ["trio", "asyncio"])
def test_forked_workers_run_tasks_with_the_results_of_one_process(tmp_path: Path, backend: str) -> None:
    suite, out = _suite(tmp_path, 3), tmp_path / "out"
    seen = _python(_RUN, str(suite), str(out), "plain", env={"REVERIE_BACKEND": backend})
    assert seen["forked"] == seen["pids"] and len(seen["pids"]) == 1, seen
    assert seen["statuses"] == {f"{name}-{k}": status for k in range(3) for name, status in EXPECTED.items()}
    results = _results(out)
    assert sorted(r["id"] for r in results) == sorted(seen["statuses"]), "one result per task"
    by = {r["worker_pid"] for r in results}
    assert by == {seen["own"], seen["forked"][0]}, f"the driver and the forked worker both ran tasks: {by}"
    assert seen["left"] == [], "every worker exited and the driver reaped it before returning"


def test_a_sweep_forks_every_setting_s_workers_before_its_loop(tmp_path: Path) -> None:
    suite, out = _suite(tmp_path, 2), tmp_path / "sweep"
    seen = _python(_SWEEP, str(suite), str(out))
    assert len(seen["ready"]) == 2, "one worker per setting, forked up front"
    assert [r["forked"] for r in seen["ran"]] == [[pid] for pid in seen["ready"]], seen["ran"]
    assert all(r["forked"] == r["pids"] for r in seen["ran"]), "no setting spawned a worker"
    expected = {f"{name}-{k}": status for k in range(2) for name, status in EXPECTED.items()}
    assert [r["statuses"] for r in seen["ran"]] == [expected, expected]
    assert seen["left"] == []


def test_spawn_is_still_there_when_asked_for(tmp_path: Path) -> None:
    suite, out = _suite(tmp_path, 2), tmp_path / "out"
    seen = _python(_RUN, str(suite), str(out), "plain", env={"REVERIE_WORKER_START": "spawn"})
    assert seen["forked"] == [] and len(seen["pids"]) == 1, seen
    assert seen["statuses"] == {f"{name}-{k}": status for k in range(2) for name, status in EXPECTED.items()}
    assert seen["left"] == [], "every worker exited and the driver reaped it before returning"


def test_a_killed_forked_worker_turns_its_tasks_into_errors_and_the_run_goes_on(tmp_path: Path) -> None:
    suite, out = _suite(tmp_path, 4), tmp_path / "out"
    seen = _python(_RUN, str(suite), str(out), "kill")
    assert seen["killed"] == seen["forked"], seen
    results = _results(out)
    assert sorted(r["id"] for r in results) == sorted(seen["statuses"]), "every task has exactly one result"
    lost = [r for r in results if r["worker_pid"] == seen["killed"][0]]
    assert lost and all(r["status"] == "error" for r in lost)
    assert all(f"batch worker process {seen['killed'][0]} was killed by SIGKILL" in r["error"] for r in lost)
    assert all(r["status"] == EXPECTED[r["id"].rsplit("-", 1)[0]] for r in results if r not in lost)
    assert seen["left"] == []


def test_forking_is_refused_while_a_thread_runs_and_unused_workers_are_reaped() -> None:
    seen = _python(_REFUSE)
    assert seen["before"] is True and len(seen["pids"]) == 2
    assert seen["left"] == [], "released workers exited and were reaped"
    assert seen["during"] is False and seen["forked_during"] == 0
    assert _python(_REFUSE, env={"REVERIE_WORKER_START": "spawn"})["pids"] == []


_INHERIT = r"""
import json, os, sys
from orchestrator.batch.executors import ProcessExecutor
backend = os.environ["REVERIE_BACKEND"]
name = f"anyio._backends._{backend}"
before = name in sys.modules
executor = ProcessExecutor(4, processes=2)
executor.prefork(8)
after = name in sys.modules
executor.release()
print(json.dumps({"before": before, "after": after}))
"""


@pytest.mark.parametrize("backend", ["trio", "asyncio"])
def test_forked_workers_inherit_the_event_loop_library(backend: str) -> None:
    """The loop the run will use is imported before the fork, so no worker imports it again."""
    seen = _python(_INHERIT, env={"REVERIE_BACKEND": backend})
    assert seen == {"before": False, "after": True}, seen

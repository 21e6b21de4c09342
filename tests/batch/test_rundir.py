"""A run directory has one owner (O4): a second run into it is refused with one line
naming the owner, a lock left by a ``kill -9``-ed owner is taken over, and tasks start in suite order."""

from __future__ import annotations

import fcntl
import json
import os
import signal
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from orchestrator.batch.executors import LocalExecutor
from orchestrator.batch.results import RESULTS_FILE
from orchestrator.batch.run import run_suite
from orchestrator.batch.rundir import LOCK_FILE, RunDirBusy, check_free, own_run_dir
from orchestrator.batch.runner import RunOptions
from orchestrator.batch.suite import parse_task
from tests.batch.helpers import TINY, write_suite

ROOT = Path(__file__).resolve().parents[2]
PASSING = [t for t in TINY if t["id"] != "wrong"]

HOLDER = """
import sys
from pathlib import Path
from orchestrator.batch.rundir import own_run_dir
with own_run_dir(Path(sys.argv[1]), "reverie run"):
    print("ready", flush=True)
    sys.stdin.read()
"""


def test_two_runs_into_one_out_one_runs_and_the_other_is_refused_in_one_line(tmp_path: Path) -> None:
    suite = write_suite(tmp_path / "s.jsonl", PASSING)
    out = tmp_path / "out"
    command = [sys.executable, "-m", "orchestrator", "run", str(suite), "--out", str(out), "-q", "--scripted-latency", "0.5"]
    procs = [subprocess.Popen(command, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE) for _ in range(2)]
    outcomes = [(p.pid, p.wait(timeout=300), p.stderr.read().decode() if p.stderr else "") for p in procs]
    for p in procs:
        assert p.stdout is not None and p.stderr is not None
        p.stdout.close()
        p.stderr.close()
    ran = [o for o in outcomes if o[1] == 0]
    refused = [o for o in outcomes if o[1] != 0]
    assert len(ran) == 1 and len(refused) == 1, outcomes
    _, code, err = refused[0]
    assert code == 1 and len(err.strip().splitlines()) == 1, err
    assert f"is in use by reverie run (pid {ran[0][0]}" in err
    lines = (out / RESULTS_FILE).read_text(encoding="utf-8").splitlines()
    assert sorted(json.loads(line)["id"] for line in lines) == sorted(t["id"] for t in PASSING)


def test_a_lock_left_by_a_killed_owner_is_taken_over(tmp_path: Path) -> None:
    out = tmp_path / "out"
    holder = subprocess.Popen(
        [sys.executable, "-c", HOLDER, str(out)], cwd=ROOT, stdin=subprocess.PIPE, stdout=subprocess.PIPE
    )
    try:
        assert holder.stdout is not None and holder.stdout.readline() == b"ready\n"
        with pytest.raises(RunDirBusy, match=f"pid {holder.pid}"):
            check_free(out)
        with pytest.raises(RunDirBusy, match=f"in use by reverie run \\(pid {holder.pid}"), own_run_dir(out, "reverie run"):
            pass
        os.kill(holder.pid, signal.SIGKILL)
        holder.wait(timeout=60)
    finally:
        if holder.poll() is None:
            holder.kill()
            holder.wait()
        for stream in (holder.stdin, holder.stdout):
            if stream is not None:
                stream.close()
    with own_run_dir(out, "reverie run"), own_run_dir(out, "reverie run"):
        check_free(out)  # this process is the owner now (and holds it twice: re-entrant)
    check_free(out)


def test_a_refusal_at_the_moment_the_owner_locks_still_names_it(tmp_path: Path) -> None:
    """The owner writes who it is just after it takes the lock; a second run looking in between
    (CI saw it) waits for the record instead of naming nobody."""
    out = tmp_path / "out"
    out.mkdir()
    fd = os.open(out / LOCK_FILE, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        refusals: list[str] = []
        looking = threading.Thread(target=lambda: refusals.append(_refusal(out)))
        looking.start()
        os.pwrite(fd, json.dumps({"pid": 4242, "command": "reverie sweep", "started": "now"}).encode(), 0)
        looking.join()
    finally:
        os.close(fd)
    assert refusals == [f"{out} is in use by reverie sweep (pid 4242, since now): wait for it to finish, or choose another --out"]


def _refusal(out: Path) -> str:
    try:
        check_free(out)
    except RunDirBusy as busy:
        return str(busy)
    return "free"


@pytest.mark.anyio
async def test_tasks_take_their_slots_in_suite_order(tmp_path: Path) -> None:
    tasks = [parse_task({"id": f"t{i:02d}", "turns": ["hi"], "settings": {"reflection_trigger": "off"},
                         "checks": [{"contains": "hi"}]})
             for i in range(8)]
    started: list[str] = []

    async def progress(task_id: str, kind: str, payload: object) -> None:
        if kind == "task.start":
            started.append(task_id)

    await run_suite(tasks, RunOptions(out_dir=tmp_path / "one"), LocalExecutor(1), progress=progress)
    assert started == [t.id for t in tasks]
    started.clear()
    await run_suite(tasks, RunOptions(out_dir=tmp_path / "three"), LocalExecutor(3), progress=progress)
    assert set(started[:3]) == {"t00", "t01", "t02"}, "the first three slots go to the first three tasks"

"""The console script leaves without the interpreter's teardown (P7), but as durably as
CPython's own shutdown: piped output complete, ``atexit`` functions and non-daemon threads finished,
the store closed, the exit status kept. And nothing a turn started outlives its work: the time from
the printed result to the exit is measured beside letta-code in ``bench/letta_side_by_side.py``; the
turn that commits memory is held to a generous bound here, since a service that polls on its way out
(the hook's, ``memfs/hook_service.py``) once cost it ~470 ms."""

from __future__ import annotations

import json
import os
import sqlite3
import subprocess
import sys
import textwrap
import time
from pathlib import Path


def _python(code: str, *args: str, home: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code), *args],
        capture_output=True,
        text=True,
        env=dict(os.environ, REVERIE_HOME=str(home)),
        timeout=120,
    )


def test_piped_json_result_is_complete_and_the_store_closed(tmp_path: Path) -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "orchestrator", "chat", "-p", "hello " * 2000, "--output-format", "json"],
        capture_output=True,
        text=True,
        env=dict(os.environ, REVERIE_HOME=str(tmp_path)),
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    result = json.loads(proc.stdout)
    assert result["type"] == "result" and "hello hello" in result["reply"]
    stores = list(tmp_path.rglob("*.sqlite*")) + list(tmp_path.rglob("*.db"))
    assert stores
    assert not [p for p in stores if p.name.endswith("-wal") and p.stat().st_size > 0]
    main = next(p for p in stores if not p.name.endswith(("-wal", "-shm")))
    with sqlite3.connect(main) as db:
        assert db.execute("PRAGMA integrity_check").fetchone() == ("ok",)


def test_atexit_functions_and_non_daemon_threads_finish(tmp_path: Path) -> None:
    marker, lines = tmp_path / "atexit.txt", tmp_path / "thread.txt"
    proc = _python(
        """
        import atexit, sys, threading
        from orchestrator.cli.app import entry

        marker, lines = sys.argv[1], sys.argv[2]
        atexit.register(lambda: open(marker, "w").write("ran"))

        def write():
            with open(lines, "w") as out:
                for i in range(200_000):
                    out.write(f"{i}\\n")

        threading.Thread(target=write, daemon=False).start()
        sys.argv = ["reverie", "--version"]
        entry()
        """,
        str(marker),
        str(lines),
        home=tmp_path,
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.startswith("reverie ")
    assert marker.read_text() == "ran"
    assert lines.read_text().splitlines()[-1] == "199999"


def test_exit_status_is_kept(tmp_path: Path) -> None:
    proc = _python(
        """
        import sys
        from orchestrator.cli import app

        app.main = lambda: sys.exit(sys.argv[1])
        app.entry()
        """,
        "the reason",
        home=tmp_path,
    )
    assert (proc.returncode, proc.stderr.strip()) == (1, "the reason")
    bad = subprocess.run(
        [sys.executable, "-m", "orchestrator", "chat", "-p", "hi", "--context-window", "nonsense"],
        capture_output=True,
        text=True,
        env=dict(os.environ, REVERIE_HOME=str(tmp_path)),
        timeout=120,
    )
    assert bad.returncode != 0 and bad.stderr.strip()


def _result_to_exit(prompt: str, home: Path) -> tuple[float, dict[str, object]]:
    """Seconds from the last byte of the printed result to the process's exit, and the result."""
    proc = subprocess.Popen(
        [sys.executable, "-m", "orchestrator", "chat", "-p", prompt, "--output-format", "json"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=dict(os.environ, REVERIE_HOME=str(home)),
    )
    assert proc.stdout is not None and proc.stderr is not None
    out, last = b"", time.monotonic()
    while chunk := os.read(proc.stdout.fileno(), 65536):
        out, last = out + chunk, time.monotonic()
    proc.wait(timeout=120)
    ended = time.monotonic()
    assert proc.returncode == 0, proc.stderr.read().decode()[-2000:]
    return ended - last, json.loads(out)


def test_a_turn_that_commits_memory_exits_right_after_its_result(tmp_path: Path) -> None:
    # The bound is the property: the least of three runs, so a loaded machine's one slow start
    # does not decide it, while a pause on the way out shows in every run.
    seconds = []
    for run in range(3):
        took, result = _result_to_exit("remember: always end answers with OK", tmp_path / str(run))
        memory = result["memory"]
        assert isinstance(memory, dict) and memory["before"] != memory["after"], result
        seconds.append(took)
    assert min(seconds) <= 0.25, seconds

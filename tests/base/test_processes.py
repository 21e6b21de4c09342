"""Process facts: reverie's own environment block hides its secrets from ``/proc`` (A6);
``kill_session`` ends a whole session, the processes re-parented to init and in other process
groups included."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from orchestrator.base.processes import kill_session, session_members
from tests.support import pid_running, wait_until

_CHILD = """
import json, os
from orchestrator.base.processes import hide_secrets_from_proc
hidden = hide_secrets_from_proc()
block = dict(e.split(b"=", 1) for e in open("/proc/self/environ", "rb").read().split(b"\\0") if b"=" in e)
print(json.dumps({"hidden": sorted(hidden), "kept": os.environ["OPENAI_API_KEY"],
                  "proc": {k.decode(): v.decode() for k, v in block.items() if k in (b"OPENAI_API_KEY", b"PLAIN")}}))
"""


def test_secrets_are_blanked_in_proc_environ_and_kept_in_os_environ() -> None:
    env = dict(os.environ, OPENAI_API_KEY="sk-live-abc", GH_TOKEN="ghp-1", PLAIN="visible")
    done = subprocess.run([sys.executable, "-c", _CHILD], env=env, capture_output=True, text=True, check=True)
    seen = json.loads(done.stdout)
    assert {"OPENAI_API_KEY", "GH_TOKEN"} <= set(seen["hidden"]) and "PLAIN" not in seen["hidden"]
    assert seen["kept"] == "sk-live-abc"
    assert seen["proc"] == {"OPENAI_API_KEY": "*" * len("sk-live-abc"), "PLAIN": "visible"}


# The leader starts a grandchild that moves to a process group of its own and is orphaned (its
# parent, the middle shell, exits at once), then writes its pid: what killpg of the leader and a
# walk of the leader's children both miss.
_ORPHAN = """
import os, sys
os.setpgid(0, 0)
with open(sys.argv[1] + ".tmp", "w") as f:
    f.write(str(os.getpid()))
os.rename(sys.argv[1] + ".tmp", sys.argv[1])
os.execvp("sleep", ["sleep", "600"])
"""


def test_kill_session_kills_orphans_in_other_process_groups(tmp_path: Path) -> None:
    ready = tmp_path / "orphan.pid"
    script = f"({sys.executable} -c '{_ORPHAN}' {ready} &); exec sleep 600"
    leader = subprocess.Popen(["sh", "-c", script], start_new_session=True)
    orphan = 0
    try:
        wait_until(ready.exists, timeout=60, what="the orphan's pid file")
        orphan = int(ready.read_text())
        stat = Path(f"/proc/{orphan}/stat").read_text().rsplit(")", 1)[1].split()
        assert int(stat[1]) != leader.pid and int(stat[2]) == orphan and int(stat[3]) == leader.pid
        os.killpg(leader.pid, signal.SIGKILL)
        assert pid_running(orphan), "killpg of the leader's group does not reach it"
        assert orphan in session_members(leader.pid)
        found = kill_session(leader.pid)
        assert orphan in found
        assert not pid_running(orphan) and session_members(leader.pid) == []
    finally:
        for pid in (orphan, leader.pid):
            if pid and pid_running(pid):
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)
        leader.wait()


def test_kill_session_refuses_its_own_session() -> None:
    with pytest.raises(ValueError, match="own session"):
        kill_session(os.getsid(0))

"""bench/scale.py's process-tree accounting on real process trees: a worker is told apart from
the driver and from what runs under it, the CPU split adds up to the kernel's total with each part
where it was burnt, RSS is summed over processes alive together, and nothing outlives the bench."""

from __future__ import annotations

import importlib.util
import sys
import textwrap
import time
from pathlib import Path
from types import ModuleType

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def scale() -> ModuleType:
    sys.path.insert(0, str(ROOT / "bench"))  # as when run as a script: its own folder first
    spec = importlib.util.spec_from_file_location("bench_scale", ROOT / "bench" / "scale.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up
    spec.loader.exec_module(module)
    return module


_BURN = "import time\ndef burn(s):\n    t = time.process_time()\n    while time.process_time() - t < s: pass\n"
_GRANDCHILD = _BURN + "burn(0.3)\n"
_WORKER = _BURN + textwrap.dedent(
    """
    import subprocess, sys, time
    ballast = bytearray(40 * 2**20)
    ballast[::4096] = b"x" * len(ballast[::4096])
    subprocess.run([sys.executable, "-c", {grandchild!r}], check=True)
    burn(0.4)
    time.sleep(0.5)
    """
).format(grandchild=_GRANDCHILD)
_DRIVER = _BURN + textwrap.dedent(
    """
    import subprocess, sys
    ballast = bytearray(60 * 2**20)
    ballast[::4096] = b"x" * len(ballast[::4096])
    worker = subprocess.Popen([sys.executable, "-c", {worker!r}])
    burn(0.3)
    worker.wait()
    """
).format(worker=_WORKER)


def _gone(pid: int) -> bool:
    """Dead (or a zombie) within a few seconds: SIGKILL is delivered, not waited for."""
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        try:
            state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
        except (FileNotFoundError, IndexError):
            return True
        if state in "ZX":
            return True
        time.sleep(0.02)
    return False


def test_cpu_split_and_memory_over_driver_worker_and_grandchild(scale: ModuleType) -> None:
    used = scale.run_tree([sys.executable, "-c", _DRIVER], timeout=60)
    assert used.returncode == 0, used.stderr
    assert used.note == ""
    assert used.workers == 1, "the driver's python child is a worker; its own python child is not"
    assert 0.3 <= used.driver_cpu < 0.3 + 0.5, used
    assert 0.4 <= used.workers_cpu < 0.4 + 0.5, used
    assert 0.3 <= used.other_cpu < 0.3 + 0.5, "the grandchild's time arrives with the worker's reaping"
    assert used.cpu == pytest.approx(used.driver_cpu + used.workers_cpu + used.other_cpu)
    assert used.largest_rss_mib >= 60
    assert used.tree_rss_mib >= used.largest_rss_mib + 40, "driver and worker were resident together"
    assert used.threads >= 2


def test_timeout_kills_the_tree_even_a_worker_in_its_own_session(scale: ModuleType, tmp_path: Path) -> None:
    pid_file = tmp_path / "worker.pid"
    driver = textwrap.dedent(
        f"""
        import os, subprocess, sys, time
        w = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"], start_new_session=True)
        open({str(pid_file)!r}, "w").write(str(w.pid))
        time.sleep(120)
        """
    )
    used = scale.run_tree([sys.executable, "-c", driver], timeout=1.5)
    assert "killed after" in used.note
    assert used.wall < 30
    worker = int(pid_file.read_text())
    assert used.workers == 1
    assert _gone(worker), "the worker went with the driver"


def test_a_worker_left_behind_is_killed_and_named(scale: ModuleType, tmp_path: Path) -> None:
    pid_file = tmp_path / "worker.pid"
    driver = textwrap.dedent(
        f"""
        import subprocess, sys, time
        w = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"], start_new_session=True)
        open({str(pid_file)!r}, "w").write(str(w.pid))
        time.sleep(0.5)
        """
    )
    used = scale.run_tree([sys.executable, "-c", driver], timeout=60)
    assert used.returncode == 0
    assert "1 worker process(es) outlived the driver" in used.note
    assert _gone(int(pid_file.read_text()))

"""Each broken setup a new user meets ends in one line naming the path or setting and the fix, with
exit code 1, never a traceback (O5): real ``reverie`` processes on the scripted model."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def reverie(*args: str, cwd: Path | None = None, **env: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "orchestrator", *args], cwd=cwd or ROOT, capture_output=True, text=True,
        env={**os.environ, **env}, timeout=300,
    )


def one_line(result: subprocess.CompletedProcess[str]) -> str:
    lines = [line for line in result.stderr.splitlines() if line.strip() and not line.lstrip().startswith("⚠")]
    assert result.returncode == 1, result.stderr
    assert len(lines) == 1 and "Traceback" not in result.stderr, result.stderr
    return lines[0]


def test_a_memory_dir_that_is_a_dangling_symlink(isolated_env: Path, tmp_path: Path) -> None:
    agent = isolated_env / "agents" / "ada"
    agent.mkdir(parents=True)
    (agent / "memory").symlink_to(tmp_path / "gone")
    line = one_line(reverie("chat", "-p", "hi", "--agent", "ada"))
    assert str(agent / "memory") in line and str(tmp_path / "gone") in line and "remove the link" in line


def test_a_worktree_root_that_is_a_file(isolated_env: Path, tmp_path: Path) -> None:
    assert reverie("chat", "-p", "my name is Ada", "--agent", "ada").returncode == 0
    blocker = tmp_path / "a-file"
    blocker.write_text("x", encoding="utf-8")
    result = reverie("reflect", "--agent", "ada", REVERIE_WORKTREES=str(blocker))
    line = one_line(result)
    assert str(blocker) in line and "REVERIE_WORKTREES" in line
    assert "reflection failed" in result.stdout + result.stderr, "the failed start is shown as a warning too"


def test_a_corrupt_head(isolated_env: Path) -> None:
    assert reverie("chat", "-p", "hi", "--agent", "ada").returncode == 0
    head = isolated_env / "agents" / "ada" / "memory" / ".git" / "HEAD"
    head.write_text("garbage\n", encoding="utf-8")
    line = one_line(reverie("chat", "-p", "hi again", "--agent", "ada"))
    assert str(head) in line and "damaged" in line and "symbolic-ref HEAD refs/heads/main" in line


def test_the_ray_executor_with_ray_address_set(tmp_path: Path) -> None:
    """O11: the run goes on, on a private Ray, and one line says so and how to join instead
    (nothing listens at the address: joining it would fail)."""
    pytest.importorskip("ray", reason="the ray extra (make test installs it) is what this note is about")
    suite = tmp_path / "s.jsonl"
    suite.write_text('{"id": "a", "turns": ["hi"], "checks": [{"contains": "hi"}]}\n', encoding="utf-8")
    result = reverie("run", str(suite), "--executor", "ray", "-q", cwd=tmp_path, RAY_ADDRESS="127.0.0.1:9")
    assert result.returncode == 0, result.stderr
    ours = [line for line in result.stderr.splitlines() if line.startswith("reverie")]
    assert ours == ["reverie: RAY_ADDRESS=127.0.0.1:9 is set; this run uses a private local Ray "
                    "(--ray-address 127.0.0.1:9 joins that cluster)"], result.stderr


def test_a_hint_names_reverie_as_it_was_run_when_it_is_not_on_path(isolated_env: Path, tmp_path: Path) -> None:
    script = Path(sys.executable).with_name("reverie")
    if not script.exists():
        pytest.skip("the reverie script is installed with the package (pip install -e .)")
    result = subprocess.run([str(script), "history", "--agent", "zed"], cwd=tmp_path, capture_output=True, text=True,
                            env={**os.environ, "PATH": "/usr/bin:/bin"}, timeout=300)
    line = one_line(result)
    assert f"`{script} chat --agent zed` creates it" in line, line

from __future__ import annotations

import json
from pathlib import Path

import pytest
import typer
from typer.testing import CliRunner

from orchestrator.cli import reflections, stress
from tests.memfs.reflection_helpers import commit_file, git, make_repo, note
from tests.support import wait_until


def _app() -> typer.Typer:
    app = typer.Typer()
    stress.register(app)
    reflections.register(app)
    return app


def test_stress_help_describes_options() -> None:
    result = CliRunner().invoke(_app(), ["stress", "--help"])
    assert result.exit_code == 0
    for option in ("--writers", "--commits", "--conflict-rate", "--seed", "--json", "--merge-policy", "--workdir"):
        assert option in result.output


def test_stress_json_output(tmp_path: Path) -> None:
    args = ["stress", "--writers", "2", "--commits", "5", "--seed", "3", "--json", "--workdir", str(tmp_path / "w")]
    result = CliRunner().invoke(_app(), args)
    assert result.exit_code == 0, result.output
    data = json.loads(result.stdout)
    assert set(data) == {
        "merged", "kept", "lost", "invalid", "merge_p50_ms", "merge_p99_ms",
        "resolved", "pending", "retried", "kept_branches", "interrupted",
    }
    assert (data["lost"], data["invalid"]) == (0, 0)
    assert data["merged"] + data["kept"] == 10


def test_stress_table_output(tmp_path: Path) -> None:
    result = CliRunner().invoke(_app(), ["stress", "-w", "1", "-m", "5", "--workdir", str(tmp_path / "w")])
    assert result.exit_code == 0, result.output
    assert "merge_p99_ms" in result.stdout and "lost" in result.stdout


def test_stress_bad_value_is_one_line_error() -> None:
    result = CliRunner().invoke(_app(), ["stress", "--writers", "0"])
    assert result.exit_code != 0
    assert "--writers must be at least 1" in str(result.exception)


def test_reflections_list_merge_discard(tmp_path: Path) -> None:
    repo = make_repo(tmp_path / "memory")
    for name in ("a", "b"):
        git(repo, "branch", f"reverie/reflection/20260101T000000Z-0000000{'1' if name == 'a' else '2'}")
    git(repo, "checkout", "-q", "reverie/reflection/20260101T000000Z-00000001")
    commit_file(repo, "notes/a.md", note("a", "x"), "a")
    git(repo, "checkout", "-q", "reverie/reflection/20260101T000000Z-00000002")
    commit_file(repo, "notes/b.md", note("b", "y"), "b")
    git(repo, "checkout", "-q", "main")
    runner = CliRunner()
    listed = runner.invoke(_app(), ["reflections", "list", "--memory-dir", str(repo)])
    assert listed.exit_code == 0, listed.output
    assert "20260101T000000Z-00000001" in listed.stdout and "unmerged" in listed.stdout
    merged = runner.invoke(_app(), ["reflections", "merge", "20260101T000000Z-00000001", "--memory-dir", str(repo)])
    assert merged.exit_code == 0, merged.output
    assert "Merged 1 commit(s)" in merged.stdout
    assert git(repo, "log", "-1", "--format=%s").strip() == "a"
    gone = runner.invoke(_app(), ["reflections", "discard", "20260101T000000Z-00000002", "-y", "--memory-dir", str(repo)])
    assert gone.exit_code == 0, gone.output
    assert "1 unmerged commit(s) dropped" in gone.stdout
    assert git(repo, "for-each-ref", "refs/heads/reverie/") == ""
    unknown = runner.invoke(_app(), ["reflections", "merge", "nope", "--memory-dir", str(repo)])
    assert unknown.exit_code != 0 and "no reflection branch 'nope'" in str(unknown.exception)


def test_reflections_list_shows_each_launch_outcome_truthfully(tmp_path: Path) -> None:
    import anyio

    from orchestrator.app.session import ChatSession
    from orchestrator.base.paths import DEFAULT_AGENT_ID
    from orchestrator.store import ReflectionRecord, utc_now

    async def setup() -> None:
        async with ChatSession.open(agent_id=DEFAULT_AGENT_ID, workspace=tmp_path) as session:
            base = dict(
                agent_id=DEFAULT_AGENT_ID, conversation_id=session.conversation_id, trigger="step-count",
                base_revision=None, through_seq=0, commits=(), files=(), created_at=utc_now(), updated_at=utc_now(),
            )
            await session.runtime.store.save_reflection(ReflectionRecord(
                id="20260101T000000Z-000000f1", branch="reverie/reflection/20260101T000000Z-000000f1",
                status="failed", reason=None, error="boom", **base,  # type: ignore[arg-type]
            ))
            await session.runtime.store.save_reflection(ReflectionRecord(
                id="20260101T000000Z-000000a1", branch="reverie/reflection/20260101T000000Z-000000a1",
                status="merged", reason=None, **base,  # type: ignore[arg-type]
            ))

    anyio.run(setup, backend="trio")
    listed = CliRunner().invoke(_app(), ["reflections", "list"])
    assert listed.exit_code == 0, listed.output
    rows = {line.split("│")[1].strip(): line for line in listed.stdout.splitlines() if "│" in line and "2026" in line}
    assert "failed" in rows["20260101T000000Z-000000f1"] and "boom" in rows["20260101T000000Z-000000f1"]
    assert "merged" in rows["20260101T000000Z-000000a1"]


@pytest.mark.slow
def test_ctrl_c_prints_the_partial_summary(tmp_path: Path) -> None:
    import os
    import signal
    import subprocess
    import sys

    env = dict(os.environ, REVERIE_HOME=str(tmp_path / "home"))
    proc = subprocess.Popen(
        [sys.executable, "-m", "orchestrator", "stress", "-w", "4", "-m", "500", "--json", "--workdir", str(tmp_path / "w")],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    repo = tmp_path / "w" / "memory"

    def merging() -> bool:
        """Stopped early, or a writer's commit reached the main checkout through merge-back."""
        if proc.poll() is not None:
            return True
        probe = subprocess.run(
            ["git", "-C", str(repo), "log", "-1", "--grep=^writer ", "--format=%h", "HEAD"], capture_output=True, text=True
        )
        return probe.returncode == 0 and probe.stdout.strip() != ""

    wait_until(merging, timeout=120, what="the stress run's first merges")
    assert proc.poll() is None, "the stress run ended before the interrupt"
    proc.send_signal(signal.SIGINT)
    out, err = proc.communicate(timeout=120)
    assert proc.returncode == 130, err
    data = json.loads(out)
    assert data["interrupted"] is True and (data["lost"], data["invalid"]) == (0, 0)
    assert "interrupted" in err
    assert git(repo, "status", "--porcelain") == ""
    assert git(repo, "for-each-ref", "refs/reverie/") == ""

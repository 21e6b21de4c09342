from __future__ import annotations

import json
from pathlib import Path

import pytest
import typer
from typer.testing import CliRunner

from orchestrator.cli import reflections, stress
from tests.memfs.reflection_helpers import commit_file, git, make_repo, note


def _app() -> typer.Typer:
    app = typer.Typer()
    stress.register(app)
    reflections.register(app)
    return app


def test_stress_help_describes_options() -> None:
    result = CliRunner().invoke(_app(), ["stress", "--help"])
    assert result.exit_code == 0
    for option in (
        "--writers", "--commits", "--conflict-rate", "--seed", "--json", "--merge-policy", "--workdir",
        "--limit-pressure", "--faults",
    ):
        assert option in result.output


def test_stress_json_carries_every_figure_and_the_verdict(tmp_path: Path) -> None:
    args = ["stress", "--writers", "2", "--commits", "5", "--seed", "3", "--json", "--workdir", str(tmp_path / "w")]
    result = CliRunner().invoke(_app(), args)
    assert result.exit_code == 0, result.output
    data = json.loads(result.stdout)
    for key in (
        "recorded", "merged", "resolved", "kept", "pending", "unmerged", "main", "lost", "invalid",
        "invalid_combined", "merge_calls", "merge_p50_ms", "merge_p99_ms", "elapsed_s", "merge_policy",
        "faults_injected", "faults_recovered", "kept_branches", "unmerged_branches", "writer_commits", "verdict",
    ):
        assert key in data, key
    assert not [key for key in data if " " in key or "(" in key]
    assert data["merge_policy"] == "resolve"
    assert data["recorded"] == sum(data[k] for k in ("merged", "resolved", "kept", "pending", "unmerged", "main"))
    assert len(data["writer_commits"]) == data["recorded"]
    assert data["verdict"] == "OK: nothing lost, memory valid"


def test_stress_table_ends_with_the_equation_and_the_verdict(tmp_path: Path) -> None:
    result = CliRunner().invoke(_app(), ["stress", "-w", "1", "-m", "5", "--workdir", str(tmp_path / "w")])
    assert result.exit_code == 0, result.output
    assert "merge_p99_ms" in result.stdout and "elapsed_s" in result.stdout
    lines = result.stdout.strip().splitlines()
    assert lines[-2].startswith("recorded ") and " = merged " in lines[-2]
    assert lines[-1] == "OK: nothing lost, memory valid"


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
    assert "20260101T000000Z-00000001" in listed.stdout and "pending" in listed.stdout
    assert "unmerged" not in listed.stdout
    merged = runner.invoke(_app(), ["reflections", "merge", "20260101T000000Z-00000001", "--memory-dir", str(repo)])
    assert merged.exit_code == 0, merged.output
    assert "Merged 1 commit(s)" in merged.stdout
    assert git(repo, "log", "-1", "--format=%s").strip() == "a"
    gone = runner.invoke(_app(), ["reflections", "discard", "20260101T000000Z-00000002", "-y", "--why", "a test branch", "--memory-dir", str(repo)])
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


def _store_a_record(tmp_path: Path, rid: str) -> None:
    import anyio

    from orchestrator.app.session import ChatSession
    from orchestrator.base.paths import DEFAULT_AGENT_ID
    from orchestrator.store import ReflectionRecord, utc_now

    async def setup() -> None:
        async with ChatSession.open(agent_id=DEFAULT_AGENT_ID, workspace=tmp_path) as session:
            await session.runtime.store.save_reflection(ReflectionRecord(
                id=rid, branch=f"reverie/reflection/{rid}", status="no_changes", reason=None,
                agent_id=DEFAULT_AGENT_ID, conversation_id=session.conversation_id, trigger="step-count",
                base_revision=None, through_seq=0, commits=(), files=(), created_at=utc_now(), updated_at=utc_now(),
            ))

    anyio.run(setup, backend="trio")


def test_reflections_list_for_another_memory_dir_shows_only_its_branches(tmp_path: Path) -> None:
    _store_a_record(tmp_path, "20260101T000000Z-0000abcd")
    other = make_repo(tmp_path / "other")
    git(other, "branch", "reverie/reflection/20260101T000000Z-00000009")
    git(other, "checkout", "-q", "reverie/reflection/20260101T000000Z-00000009")
    commit_file(other, "notes/n.md", note("n", "x"), "n")
    git(other, "checkout", "-q", "main")
    scoped = CliRunner().invoke(_app(), ["reflections", "list", "--memory-dir", str(other)])
    assert scoped.exit_code == 0, scoped.output
    assert "20260101T000000Z-00000009" in scoped.stdout
    assert "0000abcd" not in scoped.stdout and "no_changes" not in scoped.stdout
    own = CliRunner().invoke(_app(), ["reflections", "list"])
    assert own.exit_code == 0, own.output
    assert "0000abcd" in own.stdout and "00000009" not in own.stdout


def _three_branches(repo: Path) -> list[str]:
    names = [f"reverie/reflection/20260101T000000Z-0000000{i}" for i in (1, 2, 3)]
    for name, (rel, body) in zip(
        names, [("notes/a.md", "a"), ("notes/b.md", "b"), ("notes/hot.md", "branch side")], strict=True
    ):
        git(repo, "branch", name)
        git(repo, "checkout", "-q", name)
        commit_file(repo, rel, note(rel.split("/")[1][:-3], body), body)
        git(repo, "checkout", "-q", "main")
    commit_file(repo, "notes/hot.md", note("hot", "main side"), "main moves on")
    return names


def test_reflections_merge_all_keeps_conflicts_then_resolves_them(tmp_path: Path) -> None:
    repo = make_repo(tmp_path / "memory")
    names = _three_branches(repo)
    runner = CliRunner()
    both = runner.invoke(_app(), ["reflections", "merge", names[0], "--all", "--memory-dir", str(repo)])
    assert both.exit_code != 0 and "not both" in str(both.exception)
    first = runner.invoke(_app(), ["reflections", "merge", "--all", "--memory-dir", str(repo)])
    assert first.exit_code == 1, first.output
    assert "2 of 3 branch(es) merged" in first.stdout
    assert git(repo, "for-each-ref", "--format=%(refname:short)", "refs/heads/reverie/").split() == [names[2]]
    second = runner.invoke(_app(), ["reflections", "merge", "--all", "--resolve", "--memory-dir", str(repo)])
    assert second.exit_code == 0, second.output
    assert "All 1 branch(es) merged." in second.stdout
    assert git(repo, "for-each-ref", "refs/heads/reverie/") == ""
    hot = (repo / "notes" / "hot.md").read_text(encoding="utf-8")
    assert "main side" in hot and "branch side" in hot
    assert git(repo, "status", "--porcelain") == ""


def _branch_counts(repo: Path) -> dict[str, int]:
    names = git(repo, "for-each-ref", "--format=%(refname:short)", "refs/heads/reverie/").split()
    return {name: int(git(repo, "rev-list", "--count", f"main..{name}")) for name in names}


@pytest.mark.slow
def test_ctrl_c_in_a_hot_file_resolve_run_accounts_for_every_commit(tmp_path: Path) -> None:
    """Bounded: 4 writers x 40 commits, stopped once a fifth of them is made (a readiness line),
    by SIGINT to the whole process group, as a terminal sends it."""
    import os
    import signal
    import subprocess
    import sys

    env = dict(os.environ, REVERIE_HOME=str(tmp_path / "home"))
    work = tmp_path / "w"
    command = [
        sys.executable, "-m", "orchestrator", "stress", "-w", "4", "-m", "40", "--conflict-rate", "0.9",
        "--merge-policy", "resolve", "--json", "--workdir", str(work),
    ]
    proc = subprocess.Popen(
        command, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True
    )
    assert proc.stderr is not None
    seen: list[str] = []
    for line in proc.stderr:
        seen.append(line)
        if line.startswith("progress: ") and int(line.split()[1].split("/")[0]) >= 32:
            break
    else:
        raise AssertionError(f"stress ended before it was ready: {''.join(seen)}")
    os.killpg(proc.pid, signal.SIGINT)  # as a terminal's Ctrl-C: git and every child get it too
    out, err = proc.communicate(timeout=300)
    assert proc.returncode == 130, err
    data = json.loads(out)
    assert data["interrupted"] is True and data["verdict"] == "OK: nothing lost, memory valid"
    assert data["recorded"] == sum(data[k] for k in ("merged", "resolved", "kept", "pending", "unmerged", "main"))
    repo = work / "memory"
    left = _branch_counts(repo)
    kept = set(data["kept_branches"])
    assert data["unmerged_branches"] == {name: n for name, n in left.items() if name not in kept and n}
    assert data["unmerged"] == sum(data["unmerged_branches"].values()) > 0
    reachable = set(git(repo, "rev-list", "--branches").split())
    copies = set(git(repo, "log", "--branches", "--format=%an %at %s").splitlines())
    for sha in data["writer_commits"]:
        assert sha in reachable or git(repo, "log", "--no-walk", "--format=%an %at %s", sha).strip() in copies
    assert f"work directory kept: {work}" in err
    assert f"reverie reflections merge --all --resolve --memory-dir {repo}" in err
    assert git(repo, "status", "--porcelain") == ""
    finished = CliRunner().invoke(_app(), ["reflections", "merge", "--all", "--resolve", "--memory-dir", str(repo)])
    assert finished.exit_code == 0, finished.output
    assert set(_branch_counts(repo)) <= kept

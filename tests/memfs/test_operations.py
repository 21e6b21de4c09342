"""What git keeps for an operation in progress, and whether reverie started it: real git, real
stopped rebases, and states written by hand as a command would."""

from __future__ import annotations

import subprocess
from pathlib import Path

import anyio
import pytest

from orchestrator.memfs import operations
from orchestrator.memfs.guard import drain_findings, locate
from tests.memfs.reflection_helpers import commit_file, git, make_repo

pytestmark = pytest.mark.anyio


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    return make_repo(tmp_path / "memory")


def _hot(line: str) -> str:
    return f"---\nname: hot\ndescription: shared\n---\n{line}\n"


def _stop_a_rebase(repo: Path) -> None:
    git(repo, "checkout", "-qb", "side")
    commit_file(repo, "notes/hot.md", _hot("side"), "side")
    git(repo, "checkout", "-q", "main")
    commit_file(repo, "notes/hot.md", _hot("main"), "main")
    done = subprocess.run(["git", "-c", "core.hooksPath=/dev/null", "rebase", "side"], cwd=repo, capture_output=True)
    assert done.returncode != 0 and (repo / ".git" / "rebase-merge").is_dir()


async def test_a_recorded_stop_stays_and_any_change_to_it_goes(repo: Path) -> None:
    await anyio.to_thread.run_sync(_stop_a_rebase, repo)
    await operations.record(repo)
    layout = locate(repo)
    assert layout is not None
    drain_findings()
    assert operations.started_by_reverie(repo) and operations.settle(layout) == ()
    todo = repo / ".git" / "rebase-merge" / "git-rebase-todo"
    todo.write_text(todo.read_text() + "exec true\n")
    assert not await operations.intact(repo)
    removed = operations.settle(layout)
    assert "rebase-merge" in removed and operations.present(repo / ".git") == ()
    assert [f.message for f in drain_findings(repo) if "did not start (.git/rebase-merge)" in f.message]
    assert not operations.started_by_reverie(repo)


async def test_a_link_or_a_new_file_changes_the_digest(repo: Path, tmp_path: Path) -> None:
    git_dir = repo / ".git"
    (git_dir / "MERGE_HEAD").write_text("0" * 40 + "\n")
    before = operations.digest(git_dir)
    (git_dir / "MERGE_MSG").write_text("m\n")
    with_msg = operations.digest(git_dir)
    (git_dir / "MERGE_MSG").unlink()
    (git_dir / "MERGE_MSG").symlink_to(tmp_path / "elsewhere")
    assert len({before, with_msg, operations.digest(git_dir)}) == 3
    assert await operations.drop(repo) == ("MERGE_HEAD", "MERGE_MSG")
    assert not (tmp_path / "elsewhere").exists() and operations.present(git_dir) == ()

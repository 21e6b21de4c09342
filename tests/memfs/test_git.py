"""The git seam's face, ``GitRepo``: questions asked off the event loop, and a writing command's
lock-file contention retried inside the seam."""

from __future__ import annotations

import subprocess
import threading
from pathlib import Path

import anyio
import pytest

from orchestrator.memfs import gitprocess
from orchestrator.memfs.errors import GitError
from orchestrator.memfs.git import GitRepo
from tests.memfs.reflection_helpers import git, make_repo, note


def _cli(repo: Path, *args: str) -> bytes:
    return subprocess.run(["git", *args], cwd=repo, capture_output=True, check=True).stdout


@pytest.mark.anyio
async def test_ask_runs_the_question_off_the_event_loop(tmp_path: Path) -> None:
    repo = await anyio.to_thread.run_sync(make_repo, tmp_path / "r")
    head = (await anyio.to_thread.run_sync(_cli, repo, "rev-parse", "HEAD")).decode().strip()
    assert await GitRepo(repo).ask(lambda local: local.head()) == head

def test_a_writing_command_with_retry_waits_out_an_index_lock_held_outside_reverie(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``GitRepo.run(retry=True)`` (blocking): git refuses while another process has ``index.lock``
    open, and the same command goes through once that process lets go; without ``retry`` the
    refusal is the answer."""
    repo = make_repo(tmp_path / "r")
    (repo / "notes" / "y.md").write_text(note("y", "x"), encoding="utf-8")
    lock = repo / ".git" / "index.lock"
    held = lock.open("w", encoding="utf-8")
    with pytest.raises(GitError, match="index.lock"):
        GitRepo(repo).run("add", "notes/y.md")
    refused = threading.Event()
    real_run = gitprocess.run

    def watched_run(*args: object, **kwargs: object) -> gitprocess.GitResult:
        result = real_run(*args, **kwargs)  # type: ignore[arg-type]
        if not result.ok and "index.lock" in result.stderr:
            refused.set()
        return result

    def outside_git_finishes() -> None:
        refused.wait()
        lock.unlink()
        held.close()

    monkeypatch.setattr(gitprocess, "run", watched_run)
    finisher = threading.Thread(target=outside_git_finishes)
    finisher.start()
    try:
        added = GitRepo(repo).run("add", "notes/y.md", retry=True)
    finally:
        refused.set()
        finisher.join()
    assert added.ok and "notes/y.md" in git(repo, "diff", "--cached", "--name-only")

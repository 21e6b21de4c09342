"""The pool of open repositories: only a top level opens, and a repository deleted and made again at
the same path is opened afresh."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from orchestrator.memfs.errors import GitError
from orchestrator.memfs.git import GitRepo
from orchestrator.memfs.repopool import RepoPool
from tests.memfs.reflection_helpers import commit_file, make_repo, note


def _cli(repo: Path, *args: str) -> bytes:
    return subprocess.run(["git", *args], cwd=repo, capture_output=True, check=True).stdout


def test_only_a_top_level_opens_and_a_recreated_repository_is_reopened(tmp_path: Path) -> None:
    repo = make_repo(tmp_path / "r")
    (repo / "sub").mkdir()
    pool = RepoPool(size=1)
    with pool.open(repo / "sub") as inside, pool.open(tmp_path) as outside:
        assert inside is None and outside is None
    with pool.open(repo) as first:
        assert first is not None
        old = first.head()
    subprocess.run(["rm", "-rf", str(repo)], check=True)
    make_repo(repo)
    commit_file(repo, "human.md", note("human", "again"), "edit")
    with pool.open(repo) as second:
        assert second is not None and second.head() != old
    with pytest.raises(GitError, match="not the top level"):
        GitRepo(tmp_path).read(lambda local: local.head())

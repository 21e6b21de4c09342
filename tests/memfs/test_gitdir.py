"""The git directory's own files (``memfs/gitdir.py``), read where libgit2 cannot open the
repository or need not be asked, checked against what git itself says."""

from __future__ import annotations

from pathlib import Path

import pytest

from orchestrator.memfs.errors import GitError
from orchestrator.memfs.git import GitRepo
from orchestrator.memfs.gitdir import (
    check_head,
    checked_out,
    has_history,
    head_branch,
    head_ref,
    is_main_checkout,
    is_repository,
    reflog_tips,
)
from tests.memfs.reflection_helpers import commit_file, git, make_repo


def test_a_repository_is_a_folder_with_a_git_of_its_own_or_a_linked_worktree(tmp_path: Path) -> None:
    repo = make_repo(tmp_path / "r")
    git(repo, "worktree", "add", "-q", "-b", "side", str(tmp_path / "wt"))
    assert is_repository(repo) and is_repository(tmp_path / "wt")  # a .git folder, a .git file
    assert not is_repository(repo / "notes") and not is_repository(tmp_path / "missing")
    assert GitRepo(tmp_path / "wt").exists and not GitRepo(tmp_path).exists
    assert is_main_checkout(repo) and not is_main_checkout(tmp_path / "wt")


def test_the_branch_is_read_from_head_and_mid_rebase_from_the_rebase_state(tmp_path: Path) -> None:
    repo = make_repo(tmp_path / "r")
    assert head_branch(repo / ".git") == checked_out(repo / ".git") == "main"
    assert GitRepo(repo).read(lambda local: local.branch()) == "main"
    base = git(repo, "rev-parse", "HEAD").strip()
    commit_file(repo, "notes/hot.md", "---\nname: hot\ndescription: shared\n---\nmain side\n", "main")
    git(repo, "checkout", "-q", "-b", "side", base)
    commit_file(repo, "notes/hot.md", "---\nname: hot\ndescription: shared\n---\nother side\n", "side")
    assert GitRepo(repo).exists
    stopped = GitRepo(repo).run("rebase", "main", check=False, harness=True)
    assert not stopped.ok  # the same line changed on both sides: the rebase stops, HEAD detached
    assert head_branch(repo / ".git") is None
    assert checked_out(repo / ".git") == "side"
    assert GitRepo(repo).read(lambda local: (local.branch(), local.rebasing())) == (None, True)


def test_a_gone_branch_is_still_named_and_found_again_in_the_reflog(tmp_path: Path) -> None:
    repo = make_repo(tmp_path / "r")
    tip = git(repo, "rev-parse", "HEAD").strip()
    git(repo, "update-ref", "-d", "refs/heads/main")
    assert head_ref(repo) == "refs/heads/main"
    assert reflog_tips(repo, "refs/heads/main")[0] == tip
    assert has_history(repo)


def test_a_bare_init_has_no_history_and_a_damaged_head_is_named(tmp_path: Path) -> None:
    fresh = tmp_path / "fresh"
    fresh.mkdir()
    git(fresh, "init", "-q")
    assert not has_history(fresh)
    (fresh / ".git" / "HEAD").write_text("garbage\n", encoding="utf-8")
    with pytest.raises(GitError, match=r"HEAD is damaged .* symbolic-ref HEAD refs/heads/main"):
        check_head(fresh)
    check_head(tmp_path / "nothing-here")  # no repository: nothing to name

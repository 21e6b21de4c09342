"""``memfs.history``: the questions the layers above memfs ask of a repository's history, each
checked against what the git CLI says about the same repository."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from orchestrator.memfs.errors import GitError
from orchestrator.memfs.git import GitRepo
from orchestrator.memfs.history import (
    commit_identities,
    commit_message,
    first_parents,
    line_counts,
    patch,
    patch_ids,
    reachable_commits,
    read_committed,
    recent_commits,
    root_commit,
    top_level,
    tracked_files,
)
from tests.memfs.reflection_helpers import commit_file, git, make_repo, note


def _history(tmp_path: Path) -> tuple[Path, list[str]]:
    repo = make_repo(tmp_path / "r")
    made = [commit_file(repo, "notes/hot.md", note("hot", f"v{i}"), f"edit {i}") for i in range(3)]
    git(repo, "checkout", "-q", "-b", "side", made[0])
    side = commit_file(repo, "notes/cold.md", note("cold", "x"), "side note")
    git(repo, "checkout", "-q", "main")
    git(repo, "merge", "-q", "--no-ff", "-m", "merge side", side)
    return repo, made


def test_commit_lists_match_the_cli(tmp_path: Path) -> None:
    repo, _ = _history(tmp_path)
    head = git(repo, "rev-parse", "HEAD").strip()
    assert first_parents(repo, head, 4) == tuple(git(repo, "rev-list", "--first-parent", "--max-count=4", head).split())
    assert root_commit(repo, head) == git(repo, "rev-list", "--max-parents=0", head).split()[-1]
    assert reachable_commits(repo) == frozenset(git(repo, "rev-list", "--all").split())
    recent = recent_commits(repo, 2)
    assert [c.commit for c in recent] == git(repo, "log", "-2", "--format=%H").split()
    assert recent[0].subject == "merge side" and recent[0].parent == git(repo, "rev-parse", "HEAD^1").strip()
    assert first_parents(repo, "no-such-branch", 3) == () and root_commit(repo, "no-such-branch") is None


def test_files_and_contents_at_a_revision(tmp_path: Path) -> None:
    repo, made = _history(tmp_path)
    assert tracked_files(repo) == tuple(git(repo, "ls-tree", "-r", "--name-only", "HEAD").split())
    assert read_committed(repo, "notes/hot.md", made[1]) == note("hot", "v1").encode()
    assert read_committed(repo, "notes", "HEAD") is None and read_committed(repo, "nope.md") is None
    empty = tmp_path / "empty"
    subprocess.run(["git", "init", "-q", str(empty)], check=True)
    assert tracked_files(empty) is None and recent_commits(empty, 3) == ()
    assert top_level(repo / "notes") == repo.resolve()
    with pytest.raises(GitError):
        top_level(tmp_path)


def test_diffs_are_git_s_own(tmp_path: Path) -> None:
    repo, made = _history(tmp_path)
    said = patch(repo, made[0], made[2])
    assert said == git(repo, "diff", "--no-color", "--no-renames", made[0], made[2])
    assert patch(repo, None, made[0], context=0) is not None
    assert patch(repo, "0" * 40, made[0]) is None
    (change,) = line_counts(repo, made[0], made[2])
    assert (change.path, change.added, change.removed) == ("notes/hot.md", 1, 1)
    with pytest.raises(GitError):
        line_counts(repo, "0" * 40, made[0])


def test_patch_ids_find_the_same_change_on_another_commit(tmp_path: Path) -> None:
    repo, made = _history(tmp_path)
    git(repo, "checkout", "-q", "-b", "copy", made[0])
    git(repo, "cherry-pick", made[1])
    copy = git(repo, "rev-parse", "HEAD").strip()
    ids = patch_ids(repo, [made[1], copy])
    assert ids[made[1]] == ids[copy] and set(ids) == {made[1], copy}
    assert ids[copy] in patch_ids(repo).values()


def test_a_rebased_copy_keeps_its_identity_and_only_branches_count(tmp_path: Path) -> None:
    repo, made = _history(tmp_path)
    git(repo, "checkout", "-q", "-b", "topic", made[0])
    mine = commit_file(repo, "notes/topic.md", note("topic", "t"), "topic note")
    git(repo, "rebase", "-q", "main")
    copy = git(repo, "rev-parse", "HEAD").strip()
    git(repo, "update-ref", "refs/reverie/pin", mine)
    git(repo, "checkout", "-q", "main")
    git(repo, "branch", "-q", "-D", "topic")
    assert mine in reachable_commits(repo) and mine not in reachable_commits(repo, branches_only=True)
    git(repo, "branch", "-q", "topic", copy)
    theirs = commit_identities(repo, [mine, "0" * 40])
    assert set(theirs) == {mine} and theirs[mine] == commit_identities(repo)[copy] and copy != mine
    assert commit_identities(repo, []) == {}


def test_a_commit_message_and_a_reflog_as_the_cli_has_them(tmp_path: Path) -> None:
    repo, _ = _history(tmp_path)
    head = git(repo, "rev-parse", "HEAD").strip()
    found = commit_message(repo)
    assert found is not None and found[0] == head
    assert found[1] == git(repo, "cat-file", "commit", head).partition("\n\n")[2] == "merge side\n"
    assert commit_message(repo, "no-such-branch") is None
    reflog = GitRepo(repo).read(lambda local: local.reflog("refs/heads/main"))
    assert reflog == tuple(git(repo, "log", "-g", "--format=%H", "main").split())
    assert GitRepo(repo).read(lambda local: local.reflog("refs/heads/nothing")) == ()

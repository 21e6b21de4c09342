"""The guard (A1): a repository's own config and layout never make reverie's git run a
program; real git in temp dirs, payloads that would write a marker file."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from orchestrator.memfs import guard
from orchestrator.memfs.errors import GitError
from orchestrator.memfs.git import GitRepo
from orchestrator.memfs.guard import RepositoryRefused
from orchestrator.memfs.repo import commit_memory, init_memory_repo, repo_status
from orchestrator.memfs.repopool import open_local


def _git(repo: Path, *args: str) -> str:
    return subprocess.run(["git", "-C", str(repo), *args], capture_output=True, text=True, check=True).stdout


@pytest.fixture
def memory(tmp_path: Path) -> Path:
    repo = tmp_path / "memory"
    init_memory_repo(repo)
    guard.drain_findings()
    return repo


def _payload(marker: Path) -> str:
    return f'echo ran > "{marker}"; env >> "{marker}"; false #'


def test_the_repositorys_own_fsmonitor_hooks_and_filters_never_run(memory: Path, tmp_path: Path) -> None:
    marker = tmp_path / "ran.txt"
    _git(memory, "config", "core.fsmonitor", _payload(marker))
    _git(memory, "config", "filter.evil.clean", f'sh -c \'{_payload(marker)}\'; cat')
    _git(memory, "config", "filter.evil.smudge", f'sh -c \'{_payload(marker)}\'; cat')
    _git(memory, "config", "filter.evil.required", "true")
    _git(memory, "config", "merge.evil.driver", _payload(marker))
    _git(memory, "config", "core.hooksPath", str(tmp_path / "hooks"))
    (tmp_path / "hooks").mkdir()
    (tmp_path / "hooks" / "post-commit").write_text(f"#!/bin/sh\n{_payload(marker)}\n")
    (tmp_path / "hooks" / "post-commit").chmod(0o755)
    (memory / ".git" / "info").mkdir(exist_ok=True)
    (memory / ".git" / "info" / "attributes").write_text("* filter=evil merge=evil diff=evil\n")
    _git(memory, "config", "diff.evil.command", _payload(marker))
    (memory / "human.md").write_text("---\nname: human\ndescription: The person\n---\nLikes tea.\n")
    GitRepo(memory).run("status", "--porcelain")
    commit_memory(memory, "tea")
    GitRepo(memory).run("diff", "HEAD~1", "HEAD")
    GitRepo(memory).run("log", "-p", "-1")
    GitRepo(memory).run("checkout", "-q", "HEAD~1", "--", "human.md")
    assert not marker.exists()
    assert "Likes tea." in _git(memory, "show", "HEAD:human.md")


def test_a_planted_commondir_is_removed_and_reported(memory: Path, tmp_path: Path) -> None:
    evil = tmp_path / "evilgit"
    subprocess.run(["cp", "-a", str(memory / ".git"), str(evil)], check=True)
    (memory / ".git" / "commondir").write_text(f"{evil}\n")
    head = GitRepo(memory).run("rev-parse", "HEAD").stdout.strip()
    assert not (memory / ".git" / "commondir").exists()
    assert head == _git(memory, "rev-parse", "HEAD").strip()
    found = guard.drain_findings(memory)
    assert len(found) == 1 and found[0].restored and str(evil) in found[0].message


def test_a_commondir_planted_after_the_check_is_not_followed(memory: Path, tmp_path: Path) -> None:
    layout = guard.locate(memory)
    assert layout is not None
    evil = tmp_path / "evilgit"
    subprocess.run(["cp", "-a", str(memory / ".git"), str(evil)], check=True)
    marker = tmp_path / "ran.txt"
    subprocess.run(["git", "config", "-f", str(evil / "config"), "core.fsmonitor", _payload(marker)], check=True)
    (memory / ".git" / "commondir").write_text(f"{evil}\n")
    env = dict(layout.environment())
    said = subprocess.run(["git", "rev-parse", "--git-common-dir"], cwd=memory, env={**os.environ, **env}, capture_output=True, text=True)
    assert Path(said.stdout.strip()) == memory / ".git"


def test_an_include_in_the_repository_config_is_refused_in_one_line(memory: Path, tmp_path: Path) -> None:
    (tmp_path / "extra.cfg").write_text("[core]\n\tpager = cat\n")
    _git(memory, "config", "include.path", str(tmp_path / "extra.cfg"))
    with pytest.raises(RepositoryRefused) as refused:
        GitRepo(memory).run("status")
    assert "\n" not in str(refused.value)
    assert "include.path" in str(refused.value) and "--unset-all include.path" in str(refused.value)


def test_alternates_are_refused_before_git_or_libgit2_reads_them(memory: Path, tmp_path: Path) -> None:
    other = tmp_path / "other"
    init_memory_repo(other)
    (memory / ".git" / "objects" / "info").mkdir(exist_ok=True)
    (memory / ".git" / "objects" / "info" / "alternates").write_text(f"{other / '.git' / 'objects'}\n")
    with pytest.raises(RepositoryRefused, match="repack -a -d"):
        GitRepo(memory).run("status")
    with pytest.raises(RepositoryRefused):
        open_local(memory)


def test_a_dotgit_file_in_place_of_the_memory_repository_is_refused(memory: Path, tmp_path: Path) -> None:
    moved = tmp_path / "moved-git"
    (memory / ".git").rename(moved)
    (memory / ".git").write_text(f"gitdir: {moved}\n")
    with pytest.raises(RepositoryRefused, match="not the repository's own folder"):
        init_memory_repo(memory)
    with pytest.raises(RepositoryRefused, match="not a worktree record"):
        repo_status(memory)


def test_a_worktree_record_pointed_elsewhere_is_restored(memory: Path, tmp_path: Path) -> None:
    tree = tmp_path / "wt"
    GitRepo(memory).run("worktree", "add", "-q", "-b", "side", str(tree))
    record = Path(_git(tree, "rev-parse", "--absolute-git-dir").strip())
    evil = tmp_path / "evilgit"
    subprocess.run(["cp", "-a", str(memory / ".git"), str(evil)], check=True)
    (record / "commondir").write_text(f"{evil}\n")
    assert Path(GitRepo(tree).run("rev-parse", "--path-format=absolute", "--git-common-dir").stdout.strip()) == memory / ".git"
    assert (record / "commondir").read_text().strip() == "../.."
    assert any(f.restored for f in guard.drain_findings(tree))


def test_no_api_key_reaches_a_git_process(memory: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test-secret")
    monkeypatch.setenv("OTHER_API_KEY", "sk-other")
    said = GitRepo(memory).run("var", "GIT_EDITOR")
    assert said.ok
    env = GitRepo(memory).run("-c", "alias.e=!env", "e").stdout
    assert "sk-test-secret" not in env and "sk-other" not in env


def test_a_config_with_a_subsection_holding_equals_is_still_neutralised(memory: Path, tmp_path: Path) -> None:
    marker = tmp_path / "ran.txt"
    _git(memory, "config", "filter.a=b.clean", f"sh -c 'echo ran > {marker}'; cat")
    (memory / ".gitattributes").write_text("*.md filter=a=b\n")
    (memory / "human.md").write_text("changed\n")
    GitRepo(memory).run("add", "-A")
    assert not marker.exists()


def test_git_refusing_is_not_a_git_error_that_callers_swallow(memory: Path) -> None:
    (memory / ".git" / "objects" / "info").mkdir(exist_ok=True)
    (memory / ".git" / "objects" / "info" / "alternates").write_text("/nowhere\n")
    with pytest.raises(RepositoryRefused):
        GitRepo(memory).run("status", check=False)
    assert not isinstance(RepositoryRefused("x"), GitError)


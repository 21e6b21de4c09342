from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from orchestrator.memfs import guard
from orchestrator.memfs import repo as memfs_repo
from orchestrator.memfs.errors import GitError
from orchestrator.memfs.repo import (
    INITIAL_COMMIT_MESSAGE,
    MemoryCommitRejected,
    commit_memory,
    head_revision,
    index_corrupt,
    init_memory_repo,
    repo_status,
)


def _git(repo: Path, *args: str) -> str:
    return subprocess.run(["git", "-C", str(repo), *args], capture_output=True, text=True, check=True).stdout


def test_init_creates_valid_v2_repo_with_hook(tmp_path: Path) -> None:
    repo = tmp_path / "memory"
    revision = init_memory_repo(repo)
    assert head_revision(repo) == revision
    assert _git(repo, "log", "--format=%s").strip() == INITIAL_COMMIT_MESSAGE
    assert sorted(_git(repo, "ls-tree", "--name-only", "HEAD").split()) == ["MEMORY.md", "human.md", "persona.md"]
    assert (repo / ".git" / "hooks" / "pre-commit").exists()
    assert (repo / ".git" / "letta-memory-layout-policy").read_text() == "root-marker\n"
    assert init_memory_repo(repo) == revision, "initialising again changes nothing"


def test_init_refuses_a_non_repository_with_files(tmp_path: Path) -> None:
    (tmp_path / "stuff.txt").write_text("x")
    with pytest.raises(GitError, match="not empty"):
        init_memory_repo(tmp_path)


def test_init_works_without_any_git_identity(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("GIT_AUTHOR_NAME", "GIT_AUTHOR_EMAIL", "GIT_COMMITTER_NAME", "GIT_COMMITTER_EMAIL", "EMAIL"):
        monkeypatch.delenv(name, raising=False)
    repo = tmp_path / "memory"
    init_memory_repo(repo)
    assert _git(repo, "config", "user.name").strip() == "reverie"
    (repo / "human.md").write_text("---\nname: human\ndescription: d\n---\nhand edit\n")
    subprocess.run(["git", "-C", str(repo), "commit", "-qam", "by hand"], check=True)


def test_commit_rejects_invalid_tree_and_keeps_the_staged_work(tmp_path: Path) -> None:
    repo = tmp_path / "memory"
    init_memory_repo(repo)
    (repo / "notes.md").write_text("no frontmatter\n")
    with pytest.raises(MemoryCommitRejected) as info:
        commit_memory(repo, "add notes")
    assert info.value.report.startswith("Memory validation failed:")
    assert any("notes.md" in e for e in info.value.errors)
    assert repo_status(repo).dirty and (repo / "notes.md").exists()
    (repo / "notes.md").write_text("---\nname: notes\ndescription: scratch\n---\nok\n")
    result = commit_memory(repo, "add notes")
    assert result.files == ("notes.md",) and head_revision(repo) == result.revision


def test_hand_typed_commit_of_invalid_tree_is_rejected_by_the_hook(tmp_path: Path) -> None:
    repo = tmp_path / "memory"
    init_memory_repo(repo)
    (repo / "persona.md").write_text("lost the frontmatter\n")
    proc = subprocess.run(["git", "-C", str(repo), "commit", "-qam", "oops"], capture_output=True, text=True)
    assert proc.returncode == 1
    assert proc.stderr == "Memory validation failed:\n\n  persona.md: missing frontmatter (must start with ---)\n"


def test_damaged_repository_is_named_as_such(tmp_path: Path) -> None:
    repo = tmp_path / "memory"
    (repo / ".git").mkdir(parents=True)
    (repo / ".git" / "HEAD").write_text("garbage\n")
    with pytest.raises(GitError, match="damaged"):
        init_memory_repo(repo)


def test_reverie_s_own_commit_rebuilds_a_corrupt_index_first(tmp_path: Path) -> None:
    """A9: a corrupt index no longer fails every memory commit."""
    memory = tmp_path / "memory"
    init_memory_repo(memory)
    guard.drain_findings()
    (memory / ".git" / "index").write_bytes(b"DIRC" + b"\0" * 60)
    (memory / "human.md").write_text("---\nname: human\ndescription: The person\n---\nLikes tea.\n")
    commit_memory(memory, "tea")
    assert "Likes tea." in _git(memory, "show", "HEAD:human.md")
    assert (memory / ".git" / "index.corrupt").exists()
    assert any("index was corrupt" in f.message for f in guard.drain_findings(memory))


def test_an_index_that_passed_is_judged_again_once_written_in_place(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A sound index is remembered by its file's identity and times, not read again; damage written
    into the same file (same size, its modification time put back) moves its change time and is found."""
    memory = tmp_path / "memory"
    init_memory_repo(memory)
    index = memory / ".git" / "index"
    monkeypatch.setattr(memfs_repo, "_SETTLED_NS", -1)  # every file counts as settled: remembered at once
    assert not index_corrupt(index)
    before = index.stat()
    sound = index.read_bytes()
    with index.open("r+b") as f:
        f.seek(40)
        f.write(bytes(b ^ 0xFF for b in sound[40:48]))
    os.utime(index, ns=(before.st_atime_ns, before.st_mtime_ns))
    assert index.stat().st_size == before.st_size
    assert index_corrupt(index)
    index.write_bytes(sound)
    assert not index_corrupt(index)
    replaced = index.with_name("index.new")
    replaced.write_bytes(b"DIRC" + bytes(len(sound) - 4))
    os.replace(replaced, index)
    assert index_corrupt(index)

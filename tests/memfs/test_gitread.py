"""The in-process reads (libgit2) checked against what the git CLI says about the same repository,
and the caps every walk of a committed tree stops at."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from orchestrator.memfs.git import GitRepo
from orchestrator.memfs.gittrees import MAX_TREE_DEPTH, MAX_TREE_PATHS, TreeTooLarge
from tests.memfs.reflection_helpers import commit_file, git, make_repo, note
from tests.memfs.tree_bombs import plant


def _cli(repo: Path, *args: str) -> bytes:
    return subprocess.run(["git", *args], cwd=repo, capture_output=True, check=True).stdout


def test_status_matches_git_porcelain(tmp_path: Path) -> None:
    repo = make_repo(tmp_path / "r")
    commit_file(repo, "notes/a.md", note("a", "one"), "edit")
    (repo / "human.md").write_text(note("human", "changed"), encoding="utf-8")
    (repo / "new.md").write_text("x\n", encoding="utf-8")
    (repo / "fresh").mkdir()
    (repo / "fresh" / "deep.md").write_text("y\n", encoding="utf-8")
    (repo / "notes" / "a.md").unlink()
    (repo / "staged.md").write_text("z\n", encoding="utf-8")
    git(repo, "add", "staged.md")
    expected = [
        (entry[:2], entry[3:])
        for entry in _cli(repo, "status", "--porcelain=v1", "-z").decode().split("\0")
        if entry
    ]
    with GitRepo(repo).open() as local:
        assert local is not None
        assert list(local.status()) == expected
        assert local.dirty()


def test_files_are_exactly_ls_tree_with_non_ascii_and_odd_names(tmp_path: Path) -> None:
    repo = make_repo(tmp_path / "r")
    for name in ("日本語/メモ.md", " lead.md", 'say "hi"\t.md', "z/y/x.md"):
        (repo / name).parent.mkdir(parents=True, exist_ok=True)
        (repo / name).write_text("x\n", encoding="utf-8")
    (repo / os.fsdecode(b"bad\xff.md")).write_bytes(b"q\n")
    git(repo, "add", "-A")
    git(repo, "commit", "-qm", "names")
    listed = []
    for record in _cli(repo, "ls-tree", "-r", "-z", "HEAD").split(b"\0"):
        if record:
            meta, _, path = record.partition(b"\t")
            mode, _, oid = meta.decode().split(" ")
            listed.append((path.decode("utf-8", "surrogateescape"), mode, oid))
    with GitRepo(repo).open() as local:
        assert local is not None
        resolved = local.resolve("HEAD")
        assert resolved is not None
        assert list(local.files(resolved[1])) == listed


def test_commits_ancestry_and_changed_paths_match_the_cli(tmp_path: Path) -> None:
    repo = make_repo(tmp_path / "r")
    base = _cli(repo, "rev-parse", "HEAD").decode().strip()
    git(repo, "checkout", "-qb", "side")
    for i in range(3):
        commit_file(repo, f"side/{i}.md", note(f"s{i}", "x"), "edit")
    tip = _cli(repo, "rev-parse", "HEAD").decode().strip()
    git(repo, "checkout", "-q", "main")
    commit_file(repo, "human.md", note("human", "main moved"), "edit")
    head = _cli(repo, "rev-parse", "HEAD").decode().strip()
    with GitRepo(repo).open() as local:
        assert local is not None
        assert list(local.commits(head, tip)) == _cli(repo, "rev-list", "--reverse", f"{head}..{tip}").decode().split()
        assert local.merge_base(head, tip) == base
        assert local.is_ancestor(base, tip) and not local.is_ancestor(tip, head)
        assert local.ahead(head, tip) == 3
        names = _cli(repo, "diff", "--name-only", "-z", "--no-renames", f"{head}...{tip}").decode().split("\0")
        assert list(local.changed_paths(head, tip)) == [n for n in names if n]

def test_a_tree_of_ten_million_paths_stops_at_the_path_cap_without_expanding(tmp_path: Path) -> None:
    repo = make_repo(tmp_path / "r")
    head = plant(repo, fanout=10, levels=7)
    with GitRepo(repo).open() as local:
        assert local is not None
        tree = local.resolve(head)[1]  # type: ignore[index]
        seen = 0
        with pytest.raises(TreeTooLarge) as caught:
            for _ in local.walk(tree):
                seen += 1
        assert seen <= MAX_TREE_PATHS
        assert caught.value.cap == "MAX_TREE_PATHS" and caught.value.path.startswith("bomb/d0/")
        assert local.oversized(tree) is not None and local.oversized(local.resolve("HEAD~1")[1]) is None  # type: ignore[index]
    message = str(caught.value)
    assert "\n" not in message and f"more than {MAX_TREE_PATHS} paths (MAX_TREE_PATHS)" in message


def test_a_file_five_thousand_folders_deep_stops_at_the_depth_cap_without_recursion(tmp_path: Path) -> None:
    repo = make_repo(tmp_path / "r")
    plant(repo, fanout=1, levels=5000)
    with GitRepo(repo).open() as local:
        assert local is not None
        with pytest.raises(TreeTooLarge) as caught:
            list(local.walk(local.resolve("HEAD")[1]))  # type: ignore[index]
    assert caught.value.cap == "MAX_TREE_DEPTH" and caught.value.path.count("/") == MAX_TREE_DEPTH
    assert len(str(caught.value)) < 300 and "…" in str(caught.value)


def test_long_names_stop_at_the_byte_cap_below_the_path_cap(tmp_path: Path) -> None:
    repo = make_repo(tmp_path / "r")
    plant(repo, fanout=2, levels=15, name="n" * 200)  # 2^15 paths of ~3,000 bytes each
    with GitRepo(repo).open() as local:
        assert local is not None
        with pytest.raises(TreeTooLarge) as caught:
            list(local.walk(local.resolve("HEAD")[1]))  # type: ignore[index]
    assert caught.value.cap == "MAX_TREE_BYTES"


def test_a_real_sized_tree_walks_whole_in_ls_tree_order(tmp_path: Path) -> None:
    repo = make_repo(tmp_path / "r")
    plant(repo, fanout=10, levels=3)  # 1,000 files under 1,110 folders, well inside every cap
    expected = [line.split("\t", 1)[1] for line in _cli(repo, "ls-tree", "-r", "HEAD").decode().splitlines()]
    with GitRepo(repo).open() as local:
        assert local is not None
        assert [entry.path for entry in local.walk(local.resolve("HEAD")[1])] == expected  # type: ignore[index]


def test_status_of_an_over_cap_head_compares_only_the_work_tree_with_the_index(tmp_path: Path) -> None:
    repo = make_repo(tmp_path / "r")
    plant(repo, fanout=10, levels=7)
    (repo / "notes" / "hot.md").write_text("changed\n", encoding="utf-8")
    (repo / "new.md").write_text("new\n", encoding="utf-8")
    with GitRepo(repo).open() as local:
        assert local is not None
        assert local.status() == ((" M", "notes/hot.md"), ("??", "new.md"))
        entries, changes = local.staged()
    assert set(changes.values()) == {"A"} and len(changes) == len(entries) < 10

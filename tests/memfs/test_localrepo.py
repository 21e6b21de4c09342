"""libgit2's writes on the one handle per repository: refs by compare-and-swap, worktree records,
the fast-forward under index.lock and the clean in-memory rebase, each checked against git itself."""

from __future__ import annotations

import subprocess
from pathlib import Path

from orchestrator.memfs.git import GitRepo
from tests.memfs.reflection_helpers import commit_file, git, make_repo, note


def _cli(repo: Path, *args: str) -> bytes:
    return subprocess.run(["git", *args], cwd=repo, capture_output=True, check=True).stdout


def test_refs_create_only_compare_and_delete(tmp_path: Path) -> None:
    repo = make_repo(tmp_path / "r")
    head = _cli(repo, "rev-parse", "HEAD").decode().strip()
    commit_file(repo, "human.md", note("human", "next"), "edit")
    newer = _cli(repo, "rev-parse", "HEAD").decode().strip()
    with GitRepo(repo).open() as local:
        assert local is not None
        assert local.set_ref("refs/reverie/pin", head, expected="")
        assert not local.set_ref("refs/reverie/pin", newer, expected="")
        assert not local.delete_ref("refs/reverie/pin", expected=newer)
        assert local.refs("refs/reverie/") == (("refs/reverie/pin", head),)
        assert local.delete_ref("refs/reverie/pin", expected=head)
        assert local.refs("refs/reverie/") == ()
    assert subprocess.run(["git", "rev-parse", "-q", "--verify", "refs/reverie/pin"], cwd=repo).returncode != 0


def test_an_in_process_worktree_is_one_git_knows_and_prunes(tmp_path: Path) -> None:
    repo = make_repo(tmp_path / "r")
    head = _cli(repo, "rev-parse", "HEAD").decode().strip()
    path = tmp_path / "wt" / "reflection-x"
    path.parent.mkdir()
    with GitRepo(repo).open() as local:
        assert local is not None
        local.add_worktree(path, "reverie/reflection/x", head)
    listing = _cli(repo, "worktree", "list", "--porcelain").decode()
    assert f"worktree {path}" in listing and "branch refs/heads/reverie/reflection/x" in listing
    assert _cli(path, "status", "--porcelain") == b""
    commit_file(path, "persona.md", note("persona", "from the worktree"), "edit")
    with GitRepo(repo).open() as local:
        assert local is not None
        assert local.worktrees()[1] == (path, "reverie/reflection/x")
        GitRepo(repo).run("worktree", "remove", "--force", str(path))
        git(repo, "worktree", "add", "-q", str(tmp_path / "wt" / "gone"), "HEAD")
        (tmp_path / "wt" / "gone" / ".git").unlink()
        assert local.prune_worktrees() == ("gone",)
        assert len(local.worktrees()) == 1
    assert "gone" not in _cli(repo, "worktree", "list", "--porcelain").decode()

def _branch_with(repo: Path, tmp_path: Path, rel: str, text: str) -> tuple[Path, str]:
    """A linked worktree on ``side`` at the parent's HEAD~1... with one commit writing ``rel``."""
    path = tmp_path / "wt" / "side"
    path.parent.mkdir(exist_ok=True)
    git(repo, "worktree", "add", "-q", "-b", "side", str(path), "HEAD")
    return path, commit_file(path, rel, text, "side work")


def test_fast_forward_moves_files_index_and_branch_like_git(tmp_path: Path) -> None:
    repo = make_repo(tmp_path / "r")
    path, tip = _branch_with(repo, tmp_path, "notes/new.md", note("new", "from the side"))
    with GitRepo(repo).open() as local:
        assert local is not None
        assert local.fast_forward(tip) == "done"
        assert local.head() == tip
    assert _cli(repo, "status", "--porcelain") == b""
    assert (repo / "notes" / "new.md").read_text(encoding="utf-8") == note("new", "from the side")


def test_fast_forward_never_overwrites_local_changes_or_untracked_files(tmp_path: Path) -> None:
    repo = make_repo(tmp_path / "r")
    head = _cli(repo, "rev-parse", "HEAD").decode().strip()
    path, tip = _branch_with(repo, tmp_path, "notes/hot.md", note("hot", "side"))
    (repo / "notes" / "hot.md").write_text("mine\n", encoding="utf-8")
    with GitRepo(repo).open() as local:
        assert local is not None
        assert local.fast_forward(tip) == "dirty"
        assert local.head() == head
    assert (repo / "notes" / "hot.md").read_text(encoding="utf-8") == "mine\n"
    git(repo, "checkout", "--", "notes/hot.md")
    commit_file(path, "notes/extra.md", note("extra", "side"), "more")
    (repo / "notes" / "extra.md").write_text("untracked, mine\n", encoding="utf-8")
    side = _cli(path, "rev-parse", "HEAD").decode().strip()
    with GitRepo(repo).open() as local:
        assert local is not None
        assert local.fast_forward(side) == "dirty"
        assert local.head() == head
    assert (repo / "notes" / "extra.md").read_text(encoding="utf-8") == "untracked, mine\n"


def test_fast_forward_refuses_a_tip_that_does_not_contain_head(tmp_path: Path) -> None:
    repo = make_repo(tmp_path / "r")
    path, tip = _branch_with(repo, tmp_path, "notes/new.md", note("new", "x"))
    moved = commit_file(repo, "human.md", note("human", "main moved"), "main")
    with GitRepo(repo).open() as local:
        assert local is not None
        assert local.fast_forward(tip) == "moved"
        assert local.head() == moved


def test_fast_forward_waits_for_a_git_holding_the_index_and_changes_nothing(tmp_path: Path) -> None:
    """A4: a git committing from the index (``index.lock`` held) cannot have the
    fast-forward's files swept into its commit: the fast-forward reports ``busy`` untouched."""
    repo = make_repo(tmp_path / "r")
    head = _cli(repo, "rev-parse", "HEAD").decode().strip()
    _, tip = _branch_with(repo, tmp_path, "notes/new.md", note("new", "side"))
    (repo / ".git" / "index.lock").write_bytes(b"")
    with GitRepo(repo).open() as local:
        assert local is not None
        assert local.fast_forward(tip, expected=head) == "busy"
        assert local.head() == head
    assert (repo / ".git" / "index.lock").exists() and not (repo / "notes" / "new.md").exists()


def test_a_fast_forward_that_loses_the_ref_swap_puts_the_checkout_back(tmp_path: Path) -> None:
    """The branch moves last, by compare-and-swap; a git holding the branch's ref lock at that moment
    makes the swap fail, and files, index and branch are as before (no half-done checkout)."""
    repo = make_repo(tmp_path / "r")
    head = _cli(repo, "rev-parse", "HEAD").decode().strip()
    commit_file(repo, "notes/gone.md", note("gone", "x"), "to delete on the side")
    head = _cli(repo, "rev-parse", "HEAD").decode().strip()
    path = tmp_path / "side"
    git(repo, "worktree", "add", "-q", "-b", "side", str(path), "HEAD")
    git(path, "rm", "-q", "notes/gone.md")
    commit_file(path, "notes/hot.md", note("hot", "side"), "edit")
    tip = commit_file(path, "notes/new.md", note("new", "side"), "add")
    index_before = (repo / ".git" / "index").read_bytes()
    (repo / ".git" / "refs" / "heads" / "main.lock").write_text(head + "\n")
    with GitRepo(repo).open() as local:
        assert local is not None
        assert local.fast_forward(tip, expected=head) == "moved"
        assert local.head() == head
    (repo / ".git" / "refs" / "heads" / "main.lock").unlink()
    assert (repo / ".git" / "index").read_bytes() == index_before
    assert _cli(repo, "status", "--porcelain") == b""
    assert not (repo / ".git" / "index.lock").exists()
    with GitRepo(repo).open() as local:
        assert local is not None
        assert local.fast_forward(tip, expected=head) == "done"
    assert _cli(repo, "status", "--porcelain") == b"" and not (repo / "notes" / "gone.md").exists()


def test_fast_forward_keeps_what_is_staged_elsewhere_and_refuses_to_overwrite_a_staged_path(tmp_path: Path) -> None:
    repo = make_repo(tmp_path / "r")
    head = _cli(repo, "rev-parse", "HEAD").decode().strip()
    _, tip = _branch_with(repo, tmp_path, "notes/new.md", note("new", "side"))
    (repo / "human.md").write_text(note("human", "staged, not committed"), encoding="utf-8")
    git(repo, "add", "human.md")
    (repo / "notes" / "new.md").write_text(note("new", "mine"), encoding="utf-8")
    git(repo, "add", "notes/new.md")
    (repo / "notes" / "new.md").unlink()
    with GitRepo(repo).open() as local:
        assert local is not None
        assert local.fast_forward(tip, expected=head) == "dirty"
    git(repo, "rm", "-q", "--cached", "notes/new.md")
    with GitRepo(repo).open() as local:
        assert local is not None
        assert local.fast_forward(tip, expected=head) == "done"
    assert _cli(repo, "status", "--porcelain") == b"M  human.md\n"


def test_set_ref_compares_and_swaps(tmp_path: Path) -> None:
    repo = make_repo(tmp_path / "r")
    head = _cli(repo, "rev-parse", "HEAD").decode().strip()
    other = commit_file(repo, "human.md", note("human", "moved"), "move")
    with GitRepo(repo).open() as local:
        assert local is not None
        assert local.set_ref("refs/reverie/pin", head, expected="")
        assert not local.set_ref("refs/reverie/pin", other, expected="")
        assert not local.set_ref("refs/reverie/pin", other, expected=other)
        assert local.set_ref("refs/reverie/pin", other, expected=head)
        assert not local.delete_ref("refs/reverie/pin", expected=head)
        assert local.ref("refs/reverie/pin") == other
        assert local.delete_ref("refs/reverie/pin", expected=other)


def test_rebase_in_memory_replays_onto_the_parent_or_leaves_a_conflict_to_git(tmp_path: Path) -> None:
    repo = make_repo(tmp_path / "r")
    path, old = _branch_with(repo, tmp_path, "notes/new.md", note("new", "x"))
    head = commit_file(repo, "human.md", note("human", "main moved"), "main")
    with GitRepo(path).open() as worktree:
        assert worktree is not None
        (new,) = worktree.rebase_onto(head) or ()
    assert _cli(path, "rev-parse", "HEAD").decode().strip() == new != old
    assert _cli(path, "rev-parse", f"{new}^").decode().strip() == head
    assert _cli(path, "log", "-1", "--format=%an %ae %at|%B", new) == _cli(path, "log", "-1", "--format=%an %ae %at|%B", old)
    assert _cli(path, "log", "-1", "--format=%cn", new).decode().strip() == "Reverie"
    assert _cli(path, "status", "--porcelain") == b""
    commit_file(path, "notes/hot.md", note("hot", "side edit"), "side hot")
    mine = _cli(path, "rev-parse", "HEAD").decode().strip()
    main = commit_file(repo, "notes/hot.md", note("hot", "main edit"), "main hot")
    with GitRepo(path).open() as worktree:
        assert worktree is not None
        assert worktree.rebase_onto(main) is None
    assert _cli(path, "rev-parse", "HEAD").decode().strip() == mine
    assert _cli(path, "status", "--porcelain") == b""

"""The git seam: the process runner's errors and environment, and the in-process answers
(libgit2) checked against what the git CLI says about the same repository."""

from __future__ import annotations

import json
import os
import select
import shutil
import ssl
import subprocess
import sys
import threading
from pathlib import Path

import anyio
import pytest

from orchestrator.memfs import gitprocess
from orchestrator.memfs.errors import GitError
from orchestrator.memfs.git import GitRepo
from orchestrator.memfs.gittrees import MAX_TREE_DEPTH, MAX_TREE_PATHS, TreeTooLarge
from orchestrator.memfs.repopool import RepoPool
from tests.memfs.reflection_helpers import commit_file, git, make_repo, note
from tests.memfs.tree_bombs import plant


def _cli(repo: Path, *args: str) -> bytes:
    return subprocess.run(["git", *args], cwd=repo, capture_output=True, check=True).stdout


def test_a_failed_command_is_one_line_naming_command_folder_and_git_error(tmp_path: Path) -> None:
    with pytest.raises(GitError) as caught:
        GitRepo(tmp_path).run("rev-parse", "--verify", "no-such-thing")
    message = str(caught.value)
    assert "\n" not in message
    assert message.startswith("git rev-parse --verify no-such-thing failed in") and str(tmp_path) in message
    assert caught.value.returncode != 0 and caught.value.stderr


def test_a_timeout_kills_git_and_is_a_git_error(tmp_path: Path) -> None:
    make_repo(tmp_path / "r")
    with pytest.raises(GitError, match="timed out"):
        GitRepo(tmp_path / "r").run("-c", "alias.wait=!sleep 5", "wait", git_timeout=0.2)


def test_a_timeout_also_kills_what_git_started(tmp_path: Path) -> None:
    """The runner's timeout (GitPython's kill) takes the command's children too: a hook or alias
    that would run on is gone once the GitError is raised."""
    make_repo(tmp_path / "r")
    pid_file = tmp_path / "child.pid"
    with pytest.raises(GitError, match="timed out"):
        GitRepo(tmp_path / "r").run("-c", f"alias.wait=!echo $$ > {pid_file}; exec sleep 30", "wait", git_timeout=1.0)
    pid = int(pid_file.read_text())
    if not hasattr(os, "pidfd_open"):
        pytest.skip("waiting on another process's exit needs pidfd_open (Linux)")
    try:
        handle = os.pidfd_open(pid)
    except ProcessLookupError:
        return  # gone and reaped already
    try:
        exited, _, _ = select.select([handle], [], [], 10)  # readable once the process has exited
    finally:
        os.close(handle)
    assert exited, f"pid {pid} (the alias's sleep) outlived the timeout by 10 s"


def test_a_git_that_cannot_be_found_is_a_one_line_git_error(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PATH", str(tmp_path / "no-bin"))
    with pytest.raises(GitError) as caught:
        GitRepo(tmp_path).run("rev-parse", "--show-toplevel")
    said = str(caught.value)
    assert caught.value.returncode == -1 and "\n" not in said and "cannot run git: [Errno 2]" in said


def test_loading_the_runner_ahead_without_git_leaves_the_error_to_the_first_command(tmp_path: Path) -> None:
    """A batch run loads GitPython before its clock (``load_runner``); with no git to be found
    that must not end the run there with an import failure, but be the first command's one-line
    ``GitError`` as before (a fresh interpreter: this one has GitPython loaded already)."""
    script = (
        "import sys\n"
        "from orchestrator.memfs.errors import GitError\n"
        "from orchestrator.memfs.gitprocess import load_runner, run\n"
        "load_runner()\n"
        "try:\n"
        "    run(sys.argv[1], 'rev-parse', '--show-toplevel')\n"
        "except GitError as error:\n"
        "    print(str(error))\n"
    )
    env = {**os.environ, "PATH": str(tmp_path / "no-bin")}
    done = subprocess.run([sys.executable, "-c", script, str(tmp_path)], env=env, capture_output=True, text=True, check=False)
    assert done.returncode == 0, done.stderr
    assert "cannot run git" in done.stdout and done.stdout.count("\n") == 1, done.stdout


def test_a_folder_that_is_not_there_is_a_git_error_not_another_folder(tmp_path: Path) -> None:
    with pytest.raises(GitError, match="is not a directory"):
        GitRepo(tmp_path / "missing").run("rev-parse", "--show-toplevel")


def test_input_larger_than_a_pipe_reaches_git_whole(tmp_path: Path) -> None:
    repo = make_repo(tmp_path / "r")
    data = "".join(f"line {i}\n" for i in range(20_000)).encode()
    oid = GitRepo(repo).run("hash-object", "-w", "--stdin", input=data).stdout.strip()
    assert GitRepo(repo).run("cat-file", "blob", oid).out == data
    assert GitRepo(repo).run("hash-object", "--stdin", input=b"x\n").stdout.strip() == "587be6b4c3f93f93c489c0111bba5596147a26cb"


def test_location_variables_of_a_surrounding_git_do_not_leak(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    repo = make_repo(tmp_path / "r")
    other = make_repo(tmp_path / "other")
    monkeypatch.setenv("GIT_DIR", str(other / ".git"))
    assert GitRepo(repo).run("rev-parse", "--absolute-git-dir").stdout.strip() == str((repo / ".git").resolve())
    inherited = GitRepo(repo).run("rev-parse", "--absolute-git-dir", inherit_location=True).stdout.strip()
    assert inherited == str((other / ".git").resolve())


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


@pytest.mark.anyio
async def test_ask_runs_the_question_off_the_event_loop(tmp_path: Path) -> None:
    repo = await anyio.to_thread.run_sync(make_repo, tmp_path / "r")
    head = (await anyio.to_thread.run_sync(_cli, repo, "rev-parse", "HEAD")).decode().strip()
    assert await GitRepo(repo).ask(lambda local: local.head()) == head


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


_LOAD = """
import json, os, sys, threading
from orchestrator.memfs.git import GitRepo
from orchestrator.memfs.libgit import load_pygit2
from pathlib import Path
if sys.argv[1] == "threaded":
    stop = threading.Event()
    threading.Thread(target=stop.wait).start()
load_pygit2()
import pygit2
with GitRepo(Path(sys.argv[2])).open() as local:
    head = local.head()
if sys.argv[1] == "threaded":
    stop.set()
print(json.dumps({"file": pygit2.settings.ssl_cert_file, "dir": pygit2.settings.ssl_cert_dir,
                  "env": os.environ.get("SSL_CERT_FILE"), "head": head}))
"""


@pytest.mark.parametrize("threads", ["alone", "threaded"])
@pytest.mark.parametrize("users_bundle", [False, True])
def test_libgit2_is_loaded_without_the_ca_bundle_only_while_it_is_the_only_thread(
    tmp_path: Path, threads: str, users_bundle: bool
) -> None:
    """reverie never asks libgit2 for TLS (push and pull are git processes), so a command's start
    skips pygit2's parse of the system CA bundle; the environment it borrows for that is put back,
    and a process with other threads (which could read the environment) gets the plain import."""
    repo = make_repo(tmp_path / "r")
    env = {k: v for k, v in os.environ.items() if k != "SSL_CERT_FILE"}
    system = ssl.get_default_verify_paths().openssl_cafile
    expected: str | None = system if os.path.isfile(system) else None
    if users_bundle:
        expected = str(tmp_path / "my-ca.pem")
        shutil.copyfile(system, expected)
        env["SSL_CERT_FILE"] = expected
    done = subprocess.run([sys.executable, "-c", _LOAD, threads, str(repo)], env=env, capture_output=True, text=True, check=True)
    seen = json.loads(done.stdout)
    assert seen["env"] == (expected if users_bundle else None), "the environment is put back as it was"
    assert seen["head"] == _cli(repo, "rev-parse", "HEAD").decode().strip()
    if threads == "alone":
        assert seen["file"] is None and seen["dir"], "no CA file parsed; the lazy directory stays"
    else:
        assert seen["file"] == expected, "another thread: the plain import, with the bundle"


# A tree of shared subtrees: bounded walks (A11; docs/architecture.md, "Bounded trees")


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

"""The git process runner: one-line errors, timeouts that kill the command and what it started,
a missing git, input larger than a pipe, and no location variable leaking in from a surrounding git."""

from __future__ import annotations

import os
import select
import subprocess
import sys
from pathlib import Path

import pytest

from orchestrator.memfs.errors import GitError
from orchestrator.memfs.git import GitRepo
from tests.memfs.reflection_helpers import make_repo


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

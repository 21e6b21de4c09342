"""The agent's git wrapper (D1) with real git: a write waits for the repository lock, whichever
way the command names the repository (the shell fast path hands a busy lock to the Python wrapper,
which says so, V7); a failed commit is recorded and a good one clears the record; git's stderr still
reaches the caller."""

from __future__ import annotations

import json
import os
import subprocess
from functools import partial
from pathlib import Path

import anyio
import anyio.abc
import anyio.to_thread
import pytest

from orchestrator.memfs.gitwrap import ensure_wrapper
from orchestrator.memfs.lockowner import PROCESS_ENV, WAIT_LINE_PREFIX
from orchestrator.memfs.locks import LOCK_FILE_NAME
from orchestrator.memfs.names import COMMIT_FAILED_FILE_NAME
from tests.memfs.reflection_helpers import git, make_repo, note, write
from tests.support import hold_merge_lock, holders, lock_held_elsewhere, wait_until


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    return make_repo(tmp_path / "memory")


def _env(repo: Path) -> dict[str, str]:
    folder = ensure_wrapper(repo / ".git")
    return {**os.environ, "PATH": f"{folder}{os.pathsep}{os.environ['PATH']}"}


def _holders(lock: Path) -> list[str]:
    """The command lines of the processes that have ``lock`` open (a wrapper waiting for it, or a
    git holding it)."""
    return [cmdline for _, cmdline in holders(lock)]


async def _git(repo: Path, *args: str) -> str:
    return (await anyio.to_thread.run_sync(lambda: git(repo, *args))).strip()


def _worktree(repo: Path, where: Path) -> Path:
    git(repo, "worktree", "add", "-q", "-b", "side", str(where))
    return where


@pytest.mark.anyio
@pytest.mark.parametrize(
    ("how", "wrapper"),
    [
        ("top level", "git-wrapper.py"),
        ("linked worktree", "git-wrapper.py"),
        ("-C from elsewhere", "git-wrapper.py"),
        ("a subfolder", "git-wrapper.py"),
    ],
)
async def test_a_write_waits_for_the_lock_whichever_way_it_names_the_repository(
    tmp_path: Path, repo: Path, how: str, wrapper: str
) -> None:
    env = await anyio.to_thread.run_sync(_env, repo)
    top = await anyio.to_thread.run_sync(_worktree, repo, tmp_path / "wt") if how == "linked worktree" else repo
    await anyio.to_thread.run_sync(write, top / "notes" / "x.md", note("x", "body"))
    cwd, prefix = {
        "top level": (top, []),
        "linked worktree": (top, []),
        "-C from elsewhere": (tmp_path, ["-C", str(top)]),
        "a subfolder": (top / "notes", []),
    }[how]
    before = await _git(top, "rev-parse", "HEAD")
    done: list[subprocess.CompletedProcess[bytes]] = []

    async def agent() -> None:
        script = f'git {" ".join(prefix)} add -A && git {" ".join(prefix)} commit -q -m "agent commit"'
        done.append(await anyio.run_process(["sh", "-c", script], cwd=cwd, env=env, check=False))

    lock = repo / ".git" / LOCK_FILE_NAME
    async with anyio.create_task_group() as tg:
        async with hold_merge_lock(repo):
            tg.start_soon(agent)
            await anyio.to_thread.run_sync(
                partial(wait_until, lambda: any(wrapper in c for c in _holders(lock)), timeout=60,
                        what=f"{wrapper} waiting on the repository lock")
            )  # fmt: skip
            # the shell's `flock -n` try closes its descriptor before it hands a busy lock to the
            # Python wrapper: the wait is for the wrapper that waits, never the try before it
            # a read goes through meanwhile
            status = await anyio.run_process(["git", *prefix, "status", "--porcelain"], cwd=cwd, env=env)
            assert "notes/x.md" in status.stdout.decode()
            assert await _git(top, "rev-parse", "HEAD") == before and not done
    assert done[0].returncode == 0, done[0].stderr.decode()
    assert await _git(top, "log", "-1", "--format=%s") == "agent commit"


def test_a_failed_commit_is_recorded_with_its_error_and_a_good_one_clears_it(repo: Path) -> None:
    env = _env(repo)
    record = repo / ".git" / COMMIT_FAILED_FILE_NAME
    failed = subprocess.run(["git", "commit", "-q", "-m", "nothing", "--", "notes/absent.md"], cwd=repo, env=env,
                            capture_output=True, text=True)
    assert failed.returncode != 0
    assert "pathspec 'notes/absent.md' did not match" in failed.stderr
    assert json.loads(record.read_text(encoding="utf-8")) == {
        "command": "commit",
        "code": failed.returncode,
        "error": "error: pathspec 'notes/absent.md' did not match any file(s) known to git",
    }
    write(repo / "notes" / "y.md", note("y", "body"))
    subprocess.run(["git", "add", "notes/y.md"], cwd=repo, env=env, check=True)
    subprocess.run(["git", "commit", "-q", "-m", "good"], cwd=repo, env=env, check=True)
    assert not record.exists()
    assert not [p.name for p in (repo / ".git").iterdir() if p.name.startswith("reverie-git.")]


def test_the_lock_is_held_while_git_runs_even_when_the_wrapper_is_gone(repo: Path, tmp_path: Path) -> None:
    """git inherits the locked descriptor: a hook that outlives a killed wrapper keeps the lock."""
    env = _env(repo)
    hooks = tmp_path / "hooks"
    hooks.mkdir()
    ready, go = tmp_path / "ready", tmp_path / "go"
    os.mkfifo(go)
    (hooks / "pre-commit").write_text(f"#!/bin/sh\n: > {ready}\nread line < {go}\n")
    (hooks / "pre-commit").chmod(0o755)
    git(repo, "config", "core.hooksPath", str(hooks))
    write(repo / "notes" / "z.md", note("z", "body"))
    git(repo, "add", "notes/z.md")
    proc = subprocess.Popen(["git", "commit", "-q", "-m", "held"], cwd=repo, env=env)
    try:
        wait_until(ready.exists, timeout=60, what="the pre-commit hook running")
        proc.kill()
        proc.wait()
        lock = repo / ".git" / LOCK_FILE_NAME
        assert [line for line in _holders(lock) if "git" in line]  # git and its hook, not the wrapper
        probe = subprocess.run(["flock", "-n", str(lock), "true"], check=False)
        assert probe.returncode != 0, "the lock was free while git was still committing"
    finally:
        with go.open("w") as release:
            release.write("go\n")
    wait_until(lambda: not _holders(repo / ".git" / LOCK_FILE_NAME), timeout=60, what="git ending")
    assert git(repo, "log", "-1", "--format=%s").strip() == "held"


async def _stderr_until(stream: anyio.abc.ByteReceiveStream, marker: bytes) -> bytes:
    said = b""
    async for chunk in stream:
        said += chunk
        if marker in said and said.endswith(b"\n"):
            break
    return said


@pytest.mark.anyio
@pytest.mark.parametrize(("how", "source"), [("top level", "reflection merge"), ("-C from elsewhere", "reflection merge"),
                                             ("top level", None)])  # fmt: skip
async def test_a_write_behind_another_processs_lock_says_so_as_its_wait_starts(
    tmp_path: Path, repo: Path, how: str, source: str | None
) -> None:
    """V7: the command's stderr carries one line, before the wait ends (the test lets the holder go
    only once it has read it), naming the holder as its owner record does: pid and what the hold is
    for; a bare ``flock`` without a record is "another process". The commit then goes through."""
    env = await anyio.to_thread.run_sync(_env, repo)
    await anyio.to_thread.run_sync(write, repo / "notes" / "w.md", note("w", "body"))
    await _git(repo, "add", "notes/w.md")
    cwd, prefix = (repo, []) if how == "top level" else (tmp_path, ["-C", str(repo)])
    async with lock_held_elsewhere(repo, source) as pid:
        agent = await anyio.open_process(["git", *prefix, "commit", "-q", "-m", "waited"], cwd=cwd, env=env)
        assert agent.stderr is not None
        with anyio.fail_after(60):  # a deadline that fails loudly, not a wait on the clock
            said = await _stderr_until(agent.stderr, WAIT_LINE_PREFIX.encode())
        assert agent.returncode is None, "still waiting: the line came as the wait started"
    async with agent:
        said += b"".join([chunk async for chunk in agent.stderr])
        assert await agent.wait() == 0, said
    line = f"reverie: memory is locked by another process (pid {pid}, {source}); waiting" if source else (
        "reverie: memory is locked by another process; waiting")
    assert said.decode().splitlines() == [line]
    assert await _git(repo, "log", "-1", "--format=%s") == "waited"


@pytest.mark.anyio
async def test_no_line_when_the_lock_is_free_or_held_by_the_process_that_ran_the_command(repo: Path) -> None:
    """V7: a free lock is taken without a word; a hold of the reverie process that ran the command
    (``REVERIE_PROCESS``) is that process's own work and is waited for silently (a wait of zero
    seconds makes both sides of the check end at once, so no clock is involved)."""
    env = await anyio.to_thread.run_sync(_env, repo)
    await anyio.to_thread.run_sync(write, repo / "notes" / "f.md", note("f", "body"))
    await _git(repo, "add", "notes/f.md")
    free = await anyio.run_process(["git", "commit", "-q", "-m", "free"], cwd=repo, env=env)
    assert free.stderr == b""
    await anyio.to_thread.run_sync(write, repo / "notes" / "g.md", note("g", "body"))
    await _git(repo, "add", "notes/g.md")
    bounded = {**env, "REVERIE_GIT_LOCK_WAIT": "0"}
    async with lock_held_elsewhere(repo, "a turn's memory sync") as pid:
        other = await anyio.run_process(["git", "commit", "-q", "-m", "x"], cwd=repo, env=bounded, check=False)
        own = await anyio.run_process(["git", "commit", "-q", "-m", "x"], cwd=repo, check=False,
                                      env={**bounded, PROCESS_ENV: str(pid)})  # fmt: skip
    assert other.returncode == own.returncode == 75
    assert other.stderr.decode().splitlines()[0] == (
        f"reverie: memory is locked by another process (pid {pid}, a turn's memory sync); waiting"
    )
    assert WAIT_LINE_PREFIX not in own.stderr.decode() and "stayed locked" in own.stderr.decode()

"""Each task's memory repository is a fresh copy of the run's template for its seed files: tasks
with the same seeds share one template, yet their repositories are independent; other seeds get
their own template."""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
from pathlib import Path

import anyio
import pytest

from orchestrator.batch.executors import LocalExecutor
from orchestrator.batch.run import run_suite
from orchestrator.batch.runner import RunOptions, task_paths
from orchestrator.batch.suite import load_suite
from orchestrator.batch.templates import copy_template, template_repo
from orchestrator.memfs.repo import DEFAULT_MEMORY_FILES
from tests.batch.helpers import TINY, write_suite

pytestmark = pytest.mark.anyio


def _git(repo: Path, *args: str) -> str:
    return subprocess.run(["git", "-C", str(repo), *args], capture_output=True, text=True, check=True).stdout


def _inspect(out: Path, task_id: str) -> tuple[str, str, str, str]:
    memory = task_paths(out, task_id).memory
    top = _git(memory, "rev-parse", "--show-toplevel").strip()
    first = _git(memory, "rev-list", "--max-parents=0", "HEAD").strip()
    return top, first, _git(memory, "log", "--format=%s"), _git(memory, "status", "--porcelain")


async def test_tasks_copy_one_template_per_seed_and_stay_independent(tmp_path: Path) -> None:
    suite = write_suite(tmp_path / "s.jsonl", [TINY[0], TINY[1], TINY[3]])
    out = tmp_path / "out"
    report = await run_suite(load_suite(suite), RunOptions(out_dir=out), LocalExecutor(3))
    assert report.summary["passed"] == 3
    rule, fact, seeded = [await anyio.to_thread.run_sync(_inspect, out, t) for t in ("rule", "fact", "seeded")]
    assert rule[0] == str(task_paths(out, "rule").memory.resolve())
    assert fact[0] == str(task_paths(out, "fact").memory.resolve())
    assert rule[1] == fact[1] != seeded[1]  # same seeds, same first commit; other seeds, another
    assert "persona" in rule[2] and "persona" not in fact[2]
    assert "human" in fact[2] and "human" not in rule[2]
    assert rule[3] == fact[3] == seeded[3] == ""
    assert len([p for p in (out / "templates").iterdir() if not p.name.startswith(".")]) == 2


def _run_git(repo: Path, *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["git", "-C", str(repo), *args], capture_output=True, text=True, check=check)


def _commits(repo: Path) -> set[str]:
    return set(_git(repo, "rev-list", "--all").split())


async def test_task_repositories_pass_fsck_and_share_no_new_objects(tmp_path: Path) -> None:
    """The copies link the template's object files; a commit in one task's repository (``rule``
    and ``fact`` both commit memory edits) exists in no other repository, the template included."""
    suite = write_suite(tmp_path / "s.jsonl", [TINY[0], TINY[1]])
    out = tmp_path / "out"
    report = await run_suite(load_suite(suite), RunOptions(out_dir=out), LocalExecutor(2))
    assert report.summary["passed"] == 2
    await anyio.to_thread.run_sync(_check_isolated, out)


def _check_isolated(out: Path) -> None:
    rule, fact = task_paths(out, "rule").memory, task_paths(out, "fact").memory
    (template,) = [p / "memory" for p in (out / "templates").iterdir() if not p.name.startswith(".")]
    for repo in (rule, fact, template):
        assert _run_git(repo, "fsck", "--full", "--strict", "--no-dangling").returncode == 0
    base = _commits(template)
    assert len(base) == 1 and base < _commits(rule) and base < _commits(fact)
    for repo, other in ((rule, fact), (fact, rule)):
        for sha in _commits(repo) - base:
            for elsewhere in (other, template):
                assert _run_git(elsewhere, "cat-file", "-e", sha, check=False).returncode != 0
    assert _git(template, "status", "--porcelain") == ""


async def test_moved_run_directory_keeps_working_repositories(tmp_path: Path) -> None:
    """Nothing in a task's repository names where it lives: after moving the run directory the
    repository is whole, and a commit still goes through the installed validation hook."""
    suite = write_suite(tmp_path / "s.jsonl", [TINY[2]])
    out = tmp_path / "out"
    report = await run_suite(load_suite(suite), RunOptions(out_dir=out), LocalExecutor(1))
    assert report.summary["passed"] == 1
    moved = tmp_path / "elsewhere"
    await anyio.Path(out).rename(moved)
    await anyio.to_thread.run_sync(_check_moved, moved)


def _check_moved(moved: Path) -> None:
    memory = task_paths(moved, "chat").memory
    assert not task_paths(moved, "chat").workspace.exists(), "a task that runs no command gets no workspace folder"
    assert _run_git(memory, "fsck", "--full", "--strict", "--no-dangling").returncode == 0
    assert _git(memory, "rev-parse", "--show-toplevel").strip() == str(memory.resolve())
    # the branch starts in packed-refs; the first commit writes it loose as usual
    assert not (memory / ".git" / "refs" / "heads").exists()
    first = _git(memory, "rev-parse", "main").strip()
    assert f"{first} refs/heads/main" in (memory / ".git" / "packed-refs").read_text()
    (memory / "notes").mkdir()
    (memory / "notes" / "b.md").write_text("---\nname: B\ndescription: a note\n---\nhello\n")
    _git(memory, "add", "notes/b.md")
    rejected = _run_git(memory, "commit", "-m", "add note", check=False)
    assert rejected.returncode == 1 and "Memory validation blocked this commit." in rejected.stderr
    (memory / "persona.md").write_text("---\nname: persona\ndescription: rules\n---\n- be brief\n")
    _git(memory, "rm", "-q", "--cached", "notes/b.md")
    _git(memory, "add", "persona.md")
    _git(memory, "commit", "-q", "-m", "edit persona")
    assert _git(memory, "log", "-1", "--format=%s").strip() == "edit persona"
    assert (memory / ".git" / "refs" / "heads" / "main").read_text().strip() == _git(memory, "rev-parse", "HEAD").strip()
    assert _git(memory, "rev-parse", "HEAD~1").strip() == first
    assert _run_git(memory, "fsck", "--full", "--strict", "--no-dangling").returncode == 0
    # the copy starts without the template's reflog; git keeps the task's own from its first commit
    assert "edit persona" in _git(memory, "reflog", "show", "main")


def _other_device_dir() -> Path | None:
    shm = Path("/dev/shm")
    return shm if shm.is_dir() and os.access(shm, os.W_OK) else None


def test_copy_falls_back_when_objects_cannot_be_linked(tmp_path: Path) -> None:
    """A template on another file system (no hard links across devices) is copied instead."""
    other = _other_device_dir()
    if other is None or other.stat().st_dev == tmp_path.stat().st_dev:
        pytest.skip("needs a writable directory on another file system (/dev/shm)")
    with tempfile.TemporaryDirectory(dir=other) as root:
        template, base, tree = template_repo(Path(root), dict(DEFAULT_MEMORY_FILES))
        target = tmp_path / "memory"
        copy_template(template, target, tree)
        assert tree.objects and all((target / rel).stat().st_nlink == 1 for rel in tree.objects)
        assert _run_git(target, "fsck", "--full", "--strict", "--no-dangling").returncode == 0
        assert _git(target, "rev-parse", "HEAD").strip() == base
        assert _git(target, "status", "--porcelain") == ""
        assert os.access(target / ".git" / "hooks" / "pre-commit", os.X_OK)


async def test_a_template_made_again_in_the_same_process_is_read_again(tmp_path: Path) -> None:
    """The template is read once per process; a run in an out directory removed since (a new
    template, another first commit) copies the new one, not what was read of the old."""
    suite = load_suite(write_suite(tmp_path / "s.jsonl", [TINY[2]]))
    out = tmp_path / "out"
    first = await run_suite(suite, RunOptions(out_dir=out), LocalExecutor(1))
    await anyio.to_thread.run_sync(shutil.rmtree, out)
    await anyio.sleep(1.1)  # a commit made in another second has another id
    second = await run_suite(suite, RunOptions(out_dir=out), LocalExecutor(1))
    assert first.summary["passed"] == second.summary["passed"] == 1
    assert first.results[0].memory_base != second.results[0].memory_base
    memory = task_paths(out, "chat").memory
    fsck = await anyio.to_thread.run_sync(lambda: _run_git(memory, "fsck", "--full", "--strict", "--no-dangling", check=False))
    assert fsck.returncode == 0

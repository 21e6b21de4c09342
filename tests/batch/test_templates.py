"""Each task's memory repository is a fresh copy of the run's template for its seed files: tasks
with the same seeds share one template, yet their repositories are independent; other seeds get
their own template."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import anyio
import pytest

from orchestrator.batch.executors import LocalExecutor
from orchestrator.batch.run import run_suite
from orchestrator.batch.runner import RunOptions, task_paths
from orchestrator.batch.suite import load_suite
from orchestrator.batch.templates import copy_template, template_repo
from orchestrator.memfs.repo import DEFAULT_MEMORY_FILES, MemoryCommitRejected
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


def test_a_copy_is_clean_by_its_stat_data_and_still_sees_changes(tmp_path: Path) -> None:
    """The copy's index holds its own files' stat data (libgit2's checkout wrote both): git lists
    no file as stat-dirty without a refresh (``diff-files``; with the template's stat data it
    listed every one, and each status hashed them all), and a change of the same size made right
    after the copy is still seen."""
    template, base, tree = template_repo(tmp_path / "templates", dict(DEFAULT_MEMORY_FILES))
    target = tmp_path / "memory"
    copy_template(template, target, tree)
    assert _git(target, "rev-parse", "HEAD").strip() == base
    assert _git(target, "diff-files", "--name-only") == ""
    assert _git(target, "status", "--porcelain") == ""
    assert _run_git(target, "fsck", "--full", "--strict", "--no-dangling").returncode == 0
    human = target / "human.md"
    data = human.read_bytes()
    human.write_bytes(data[:-2] + b"X\n")
    assert _git(target, "status", "--porcelain") == " M human.md\n"
    assert _git(target, "diff", "--name-only") == "human.md\n"


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


async def test_a_template_made_again_in_the_same_process_is_read_again(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The template is read once per process; a run in an out directory removed since (a new
    template, another first commit) copies the new one, not what was read of the old."""
    suite = load_suite(write_suite(tmp_path / "s.jsonl", [TINY[2]]))
    out = tmp_path / "out"
    first = await run_suite(suite, RunOptions(out_dir=out), LocalExecutor(1))
    await anyio.to_thread.run_sync(shutil.rmtree, out)
    # another first commit: the same files committed at another date (git reads these), as a
    # template built a second later would be, without waiting for the clock
    for variable in ("GIT_AUTHOR_DATE", "GIT_COMMITTER_DATE"):
        monkeypatch.setenv(variable, "2001-02-03T04:05:06+00:00")
    second = await run_suite(suite, RunOptions(out_dir=out), LocalExecutor(1))
    assert first.summary["passed"] == second.summary["passed"] == 1
    assert first.results[0].memory_base != second.results[0].memory_base
    memory = task_paths(out, "chat").memory
    fsck = await anyio.to_thread.run_sync(lambda: _run_git(memory, "fsck", "--full", "--strict", "--no-dangling", check=False))
    assert fsck.returncode == 0


def test_a_template_keeps_git_s_own_identity_where_there_is_one(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """With an identity in git's configuration (here ``GIT_CONFIG_GLOBAL``, which git reads and
    libgit2 does not) the repository gets none of its own and the commit is that identity's
    (less what the environment overrides: the author)."""
    config = tmp_path / "gitconfig"
    config.write_text("[user]\n\tname = Ada\n\temail = ada@example.invalid\n", encoding="utf-8")
    monkeypatch.setenv("GIT_CONFIG_GLOBAL", str(config))
    monkeypatch.delenv("GIT_COMMITTER_NAME")
    monkeypatch.delenv("GIT_COMMITTER_EMAIL")
    template, _, _ = template_repo(tmp_path / "t", {})
    assert "user." not in _git(template, "config", "--local", "--list")
    assert _git(template, "log", "-1", "--format=%an <%ae>|%cn <%ce>").strip() == "reverie-test <test@reverie.invalid>|Ada <ada@example.invalid>"


def test_seeds_git_treats_specially_are_committed_as_git_commits_them(tmp_path: Path) -> None:
    """A seeded ``.gitignore`` is honoured as ``git add -A`` honours it: the ignored seed is in the
    working tree, not in the commit."""
    seeds = {".gitignore": "scratch.md\n", "scratch.md": "not memory\n"}
    template, _, tree = template_repo(tmp_path / "t", seeds)
    assert _git(template, "ls-files").split() == [".gitignore", "MEMORY.md", "human.md", "persona.md"]
    assert (template / "scratch.md").read_text() == "not memory\n"
    assert _run_git(template, "fsck", "--full", "--strict", "--no-dangling").returncode == 0


def test_invalid_seeds_are_the_validators_report_and_leave_nothing(tmp_path: Path) -> None:
    with pytest.raises(MemoryCommitRejected) as rejected:
        template_repo(tmp_path / "t", {"persona.md": "no frontmatter\n"})
    assert str(rejected.value) == "Memory validation failed:\n\n  persona.md: missing frontmatter (must start with ---)"
    assert [p.name for p in (tmp_path / "t").iterdir() if not p.name.endswith(".lock")] == []


_BUILD_ONE = """
import sys
from pathlib import Path
from orchestrator.batch.templates import template_repo
print(template_repo(Path(sys.argv[1]), {})[1])
"""


def test_processes_building_one_template_at_once_share_it(tmp_path: Path) -> None:
    """Processes of one run (a driver and its workers) asking for the same template at the same
    moment get the same repository, and no half-built copy is left behind."""
    root = tmp_path / "templates"
    children = [
        subprocess.Popen([sys.executable, "-c", _BUILD_ONE, str(root)], stdout=subprocess.PIPE, text=True)
        for _ in range(3)
    ]
    bases = {child.communicate(timeout=60)[0].strip() for child in children}
    assert all(child.returncode == 0 for child in children)
    assert len(bases) == 1
    assert [p.name for p in root.iterdir() if not p.name.endswith(".lock")] == [p.name for p in root.iterdir() if not p.name.startswith(".")]
    (template,) = [p / "memory" for p in root.iterdir() if not p.name.startswith(".")]
    assert _git(template, "rev-parse", "HEAD").strip() == bases.pop()


@pytest.mark.parametrize("how", ["environment", "config"])
def test_a_git_template_folder_is_honoured_as_git_honours_it(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, how: str) -> None:
    """A git template folder (``GIT_TEMPLATE_DIR`` or ``init.templateDir``) leaves the build to git,
    which copies it: here a ``commit-msg`` hook every task's repository then has."""
    folder = tmp_path / "git-template"
    (folder / "hooks").mkdir(parents=True)
    (folder / "hooks" / "commit-msg").write_text("#!/bin/sh\nexit 0\n", encoding="utf-8")
    if how == "environment":
        monkeypatch.setenv("GIT_TEMPLATE_DIR", str(folder))
    else:
        config = tmp_path / "gitconfig"
        config.write_text(f"[init]\n\ttemplateDir = {folder}\n", encoding="utf-8")
        monkeypatch.setenv("GIT_CONFIG_GLOBAL", str(config))
    template, base, _ = template_repo(tmp_path / "t", {})
    assert (template / ".git" / "hooks" / "commit-msg").is_file()
    assert (template / ".git" / "hooks" / "pre-commit").is_file()
    assert _git(template, "rev-parse", "HEAD").strip() == base
    assert _run_git(template, "fsck", "--full", "--strict", "--no-dangling").returncode == 0

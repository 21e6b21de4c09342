"""One seam per kind of I/O (STYLE 1), for what import-linter cannot see: which module *calls*
``sqlite3.connect``, and which modules hand git a command line. The import contracts in
``pyproject.toml`` keep ``pygit2`` inside ``memfs/libgit.py`` and ``sqlite3`` inside the store; these
checks read the source (AST), so a call hidden behind an alias is found too."""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
_RUNNERS = {("orchestrator.memfs.gitprocess", "run")}
"""The functions that take a git command line."""
_REPO_RUNNERS = {"run", "arun"}
"""The methods of ``orchestrator.memfs.git.GitRepo`` that take one (its reads take none)."""


def _sources() -> Iterator[tuple[str, ast.Module]]:
    for package in ("orchestrator", "subagents", "prompts"):
        for path in sorted((ROOT / package).rglob("*.py")):
            rel = path.relative_to(ROOT).as_posix()
            yield rel, ast.parse(path.read_text(encoding="utf-8"), rel)


def git_command_line_users(sources: Iterator[tuple[str, ast.Module]]) -> list[str]:
    """``file: module.name`` for each import of a git runner outside ``orchestrator/memfs``, and
    ``file:line: GitRepo.method`` for each call of a repository object's runner there."""
    found = []
    for rel, tree in sources:
        if rel.startswith("orchestrator/memfs/"):
            continue
        repos = {
            target.id
            for node in ast.walk(tree)
            if isinstance(node, ast.Assign) and _makes_repo(node.value)
            for target in node.targets
            if isinstance(target, ast.Name)
        }
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom) and node.module is not None:
                found += [f"{rel}: {node.module}.{a.name}" for a in node.names if (node.module, a.name) in _RUNNERS]
            elif (
                isinstance(node, ast.Call)
                and isinstance(node.func, ast.Attribute)
                and node.func.attr in _REPO_RUNNERS
                and (_makes_repo(node.func.value) or (isinstance(node.func.value, ast.Name) and node.func.value.id in repos))
            ):
                found.append(f"{rel}:{node.lineno}: GitRepo.{node.func.attr}")
    return found


def _makes_repo(node: ast.expr) -> bool:
    return isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "GitRepo"


def sqlite_connects(sources: Iterator[tuple[str, ast.Module]]) -> list[str]:
    """``file:line`` of each ``sqlite3.connect(...)`` call."""
    return [
        f"{rel}:{node.lineno}"
        for rel, tree in sources
        for node in ast.walk(tree)
        if isinstance(node, ast.Call)
        and isinstance(node.func, ast.Attribute)
        and node.func.attr == "connect"
        and isinstance(node.func.value, ast.Name)
        and node.func.value.id == "sqlite3"
    ]


def test_no_module_outside_memfs_builds_a_git_command_line() -> None:
    assert git_command_line_users(_sources()) == []


def test_the_check_catches_a_cli_module_running_git() -> None:
    planted = ast.parse("from orchestrator.memfs.gitprocess import run as run_git\nrun_git(repo, 'log')\n")
    assert git_command_line_users(iter([("orchestrator/cli/x.py", planted)])) == ["orchestrator/cli/x.py: orchestrator.memfs.gitprocess.run"]


def test_the_check_catches_a_repository_object_running_git_outside_memfs() -> None:
    planted = ast.parse("repo = GitRepo(path)\nawait repo.arun('log')\nGitRepo(path).run('status')\nrepo.read(len)\n")
    found = git_command_line_users(iter([("orchestrator/cli/x.py", planted)]))
    assert sorted(found) == ["orchestrator/cli/x.py:2: GitRepo.arun", "orchestrator/cli/x.py:3: GitRepo.run"]


def test_store_worker_is_the_one_place_that_opens_sqlite() -> None:
    found = sqlite_connects(_sources())
    assert len(found) == 1 and found[0].startswith("orchestrator/store/worker.py:")

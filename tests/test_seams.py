"""One seam per kind of I/O (STYLE 1), for what import-linter cannot see: which module *calls*
``sqlite3.connect``, and which modules hand git a command line. The import contracts in
``pyproject.toml`` keep ``pygit2`` inside ``memfs/git.py`` and ``sqlite3`` inside the store; these
checks read the source (AST), so a call hidden behind an alias is found too."""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
_RUNNERS = {("orchestrator.memfs.git", "run"), ("orchestrator.memfs.git", "arun"), ("orchestrator.memfs.indexlock", "harness_git")}
"""The functions that take a git command line."""


def _sources() -> Iterator[tuple[str, ast.Module]]:
    for package in ("orchestrator", "subagents", "prompts"):
        for path in sorted((ROOT / package).rglob("*.py")):
            rel = path.relative_to(ROOT).as_posix()
            yield rel, ast.parse(path.read_text(encoding="utf-8"), rel)


def git_command_line_users(sources: Iterator[tuple[str, ast.Module]]) -> list[str]:
    """``file: module.name`` for each import of a git runner outside ``orchestrator/memfs``."""
    found = []
    for rel, tree in sources:
        if rel.startswith("orchestrator/memfs/"):
            continue
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom) and node.module is not None:
                found += [f"{rel}: {node.module}.{a.name}" for a in node.names if (node.module, a.name) in _RUNNERS]
            elif isinstance(node, ast.ImportFrom) and node.module is None:
                continue
    return found


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
    planted = ast.parse("from orchestrator.memfs.git import run as run_git\nrun_git(repo, 'log')\n")
    assert git_command_line_users(iter([("orchestrator/cli/x.py", planted)])) == ["orchestrator/cli/x.py: orchestrator.memfs.git.run"]


def test_store_worker_is_the_one_place_that_opens_sqlite() -> None:
    found = sqlite_connects(_sources())
    assert len(found) == 1 and found[0].startswith("orchestrator/store/worker.py:")

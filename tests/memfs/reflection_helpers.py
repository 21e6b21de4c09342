"""Helpers for the worktree/merge/recovery tests: real git, blocking, meant for worker threads."""

from __future__ import annotations

import subprocess
from pathlib import Path

from orchestrator.memfs.repo import init_memory_repo

__all__ = ["commit_file", "git", "make_repo", "note", "reachable", "write"]


def git(cwd: Path, *args: str) -> str:
    proc = subprocess.run(
        ["git", "-c", "core.hooksPath=/dev/null", *args], cwd=cwd, capture_output=True, text=True, check=False
    )
    if proc.returncode != 0:
        raise AssertionError(f"git {' '.join(args)} failed: {proc.stderr}")
    return proc.stdout


def make_repo(path: Path) -> Path:
    """A valid v2 memory repository with a child index for notes."""
    init_memory_repo(path)
    (path / "notes").mkdir()
    (path / "notes" / "MEMORY.md").write_text("# Notes\n", encoding="utf-8")
    (path / "notes" / "hot.md").write_text("---\nname: hot\ndescription: shared\n---\nbase\n", encoding="utf-8")
    git(path, "add", "notes")
    git(path, "commit", "-q", "-m", "notes")
    return path


def write(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")


def commit_file(checkout: Path, rel: str, text: str, message: str) -> str:
    write(checkout / rel, text)
    git(checkout, "add", "--", rel)
    git(checkout, "commit", "-q", "-m", message)
    return git(checkout, "rev-parse", "HEAD").strip()


def reachable(repo: Path, sha: str) -> bool:
    refs = git(repo, "for-each-ref", "--format=%(objectname)").split()
    return any(
        subprocess.run(["git", "merge-base", "--is-ancestor", sha, ref], cwd=repo, check=False).returncode == 0
        for ref in refs
    )


def note(name: str, body: str) -> str:
    return f"---\nname: {name}\ndescription: a note\n---\n{body}\n"

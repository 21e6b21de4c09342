"""Provenance as git trailers (H1): the agent's ``git commit`` through the wrapper gets reverie's
trailers, fast path and slow path alike, its own message untouched and the pre-commit hook still
deciding; the parser reads them back as git does, and a commit without them is ``outside``."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from orchestrator.memfs.gitwrap import ensure_wrapper
from orchestrator.memfs.provenance import (
    OUTSIDE,
    Provenance,
    body,
    parse,
    scoped,
    trailers_env,
    with_trailers,
)
from tests.memfs.reflection_helpers import git, make_repo, note, write

AGENT = Provenance("agent", "ada", "conv-1", "turn-7")


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    return make_repo(tmp_path / "memory")


def _wrapped(repo: Path, provenance: Provenance) -> dict[str, str]:
    folder = ensure_wrapper(repo / ".git")
    return {**os.environ, "PATH": f"{folder}{os.pathsep}{os.environ['PATH']}", **trailers_env(provenance)}


def _trailer(repo: Path, key: str) -> str:
    return git(repo, "log", "-1", f"--format=%(trailers:key={key},valueonly)").strip()


@pytest.mark.parametrize("where", ["top level (the shell wrapper)", "-C from elsewhere (the Python wrapper)"])
def test_the_agents_commit_gets_its_trailers_and_keeps_its_message(repo: Path, tmp_path: Path, where: str) -> None:
    write(repo / "notes" / "fact.md", note("fact", "the sky is blue"))
    env = _wrapped(repo, AGENT)
    cwd, prefix = (repo, []) if where.startswith("top") else (tmp_path, ["-C", str(repo)])
    subprocess.run(["git", *prefix, "add", "-A"], cwd=cwd, env=env, check=True)
    subprocess.run(["git", *prefix, "commit", "-q", "-m", "feat: a fact\n\nwhy I wrote it"], cwd=cwd, env=env, check=True)

    assert body(git(repo, "log", "-1", "--format=%B")) == "feat: a fact\n\nwhy I wrote it\n"
    assert _trailer(repo, "Reverie-Source") == "agent"
    assert (_trailer(repo, "Reverie-Agent"), _trailer(repo, "Reverie-Conversation"), _trailer(repo, "Reverie-Turn")) == (
        "ada", "conv-1", "turn-7",
    )
    assert parse(git(repo, "log", "-1", "--format=%B")) == AGENT


def test_the_hook_still_refuses_an_invalid_commit_through_the_wrapper(repo: Path) -> None:
    write(repo / "notes" / "bad.md", "no frontmatter at all\n")
    env = _wrapped(repo, AGENT)
    head = git(repo, "rev-parse", "HEAD")
    subprocess.run(["git", "add", "-A"], cwd=repo, env=env, check=True)
    said = subprocess.run(["git", "commit", "-q", "-m", "bad"], cwd=repo, env=env, capture_output=True, text=True)
    assert said.returncode != 0
    assert git(repo, "rev-parse", "HEAD") == head


def test_reverie_s_own_commits_carry_their_source_and_a_hand_edit_is_outside(repo: Path) -> None:
    assert _trailer(repo, "Reverie-Source") == "", "make_repo's last commit is plain git's"
    assert parse(git(repo, "log", "-1", "--format=%B")).source == OUTSIDE
    assert git(repo, "log", "--reverse", "--format=%(trailers:key=Reverie-Source,valueonly)").split()[0] == "init"


def test_trailers_round_trip_and_a_scope_adds_the_run_and_task() -> None:
    reflection = Provenance("reflection", "ada", "c1", reflection="r-1", trigger="step-count:5")
    assert parse(with_trailers("feat: x\n\nbody", reflection)) == reflection
    assert parse("feat: x\n\nReverie-Agent: a") == Provenance(), "no source: not reverie's"
    assert parse("Reverie-Source: agent") == Provenance(), "a subject alone has no trailers"
    assert body(with_trailers("feat: x\n\nbody", reflection)) == "feat: x\n\nbody\n"
    with scoped(run="run-9", task="t-3"):
        lines = trailers_env(AGENT)["REVERIE_TRAILERS"].splitlines()
    assert lines[-2:] == ["Reverie-Run: run-9", "Reverie-Task: t-3"]
    assert "Reverie-Run" not in trailers_env(AGENT)["REVERIE_TRAILERS"]
    assert parse(with_trailers("x", Provenance("agent", "a\nReverie-Source: forged"))).agent == "a Reverie-Source: forged"

"""A scripted session's memory, audited (H1, H2): an agent commit, a reflection merge, a
resolver-reconciled merge and a hand edit committed with plain git. Plain ``git log`` names the
writer of each of reverie's commits, and ``reverie memory log --json`` attributes every commit as
git's own trailers say (the hand edit ``outside``); then the reflection is undone."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import anyio
import pytest

from orchestrator import Home, open_session
from orchestrator.app.memory_history import kept_lines_notes
from orchestrator.memfs.gitwrap import wrapped_path
from orchestrator.memfs.merge import finalize_worktree
from orchestrator.memfs.provenance import Provenance, trailers_env
from orchestrator.memfs.undo import UndoOutcome
from orchestrator.memfs.worktrees import create_worktree
from orchestrator.models.scripted import ScriptedModel
from subagents.resolver import make_resolver
from tests.memfs.reflection_helpers import git

pytestmark = pytest.mark.anyio


def _reflection_commit(worktree: Path, reflection: str) -> None:
    """What a reflection's bash command does in its worktree: edit and commit through the wrapper."""
    persona = worktree / "persona.md"
    persona.write_text(persona.read_text(encoding="utf-8") + "- speak slowly\n", encoding="utf-8")
    env = {
        **os.environ,
        "PATH": wrapped_path(worktree, os.environ["PATH"]),
        **trailers_env(Provenance("reflection", "ada", "c-test", reflection=reflection, trigger="manual")),
    }
    subprocess.run(["git", "commit", "-q", "-am", "feat(reflection): pace"], cwd=worktree, env=env, check=True)


def _hand_edit(repo: Path) -> None:
    persona = repo / "persona.md"
    persona.write_text(persona.read_text(encoding="utf-8") + "- speak briefly\n", encoding="utf-8")
    subprocess.run(["git", "commit", "-q", "-am", "my own note"], cwd=repo, check=True)


def _log_json(home: Path) -> list[dict[str, object]]:
    proc = subprocess.run(
        [sys.executable, "-m", "orchestrator", "memory", "log", "--json", "--agent", "ada"],
        capture_output=True, text=True, env={**os.environ, "REVERIE_HOME": str(home)}, timeout=120, check=True,
    )
    return json.loads(proc.stdout)


async def test_every_commit_is_attributed_in_git_and_in_memory_log(tmp_path: Path) -> None:
    home = Home(tmp_path / "home")
    async with open_session("ada", home=home, settings={"reflection_trigger": "off"}) as chat:
        await chat.send("设定：回答末尾总是加上 🦉")
        await chat.send("I prefer green tea")
        record = await chat.reflect()
        assert record is not None and record.status == "merged"
        repo = chat.chat.agent.memory_dir
    reflection_id = record.id

    # a second reflection whose edit meets a hand edit of the same lines: the resolver reconciles it
    worktree = await create_worktree(repo, agent_id="ada", root=tmp_path / "wt")
    await anyio.to_thread.run_sync(_reflection_commit, worktree.path, worktree.id)
    await anyio.to_thread.run_sync(_hand_edit, repo)
    outcome = await finalize_worktree(repo, worktree, resolver=make_resolver(ScriptedModel(), agent_id="ada"))
    assert outcome.status == "resolved"

    said = await anyio.to_thread.run_sync(
        git, repo, "log", "--format=%H %(trailers:key=Reverie-Source,valueonly,separator=%x2C)"
    )
    by_git = dict((line.split(" ", 1) + [""])[:2] for line in said.splitlines() if line)
    assert {"agent", "reflection", "resolver", "init"} <= set(by_git.values())

    entries = await anyio.to_thread.run_sync(_log_json, home.root)
    by_log = {c: s for e in entries for c, s in zip(e["commits"], e["sources"], strict=True)}  # type: ignore[call-overload]
    assert by_log == {sha: source or "outside" for sha, source in by_git.items()}
    assert sorted(set(by_log.values())) == ["agent", "init", "outside", "reflection", "resolver"]
    grouped = {e["provenance"].get("reflection"): e for e in entries}  # type: ignore[union-attr]
    assert grouped[worktree.id]["sources"] == ["resolver"]
    assert reflection_id in grouped and grouped[reflection_id]["source"] == "reflection"
    assert "🦉" not in json.dumps(grouped[reflection_id]["provenance"])

    # the first reflection taken back from the command line: a new commit, nothing rewritten
    before = await anyio.to_thread.run_sync(git, repo, "rev-parse", "HEAD")
    proc = await anyio.to_thread.run_sync(_reverie, home.root, "memory", "undo", "--reflection", reflection_id, "--agent", "ada")
    assert proc.returncode == 0, proc.stderr
    await anyio.to_thread.run_sync(_check_undone, repo, before.strip(), grouped[reflection_id]["commits"])
    for args, said in (
        (("memory", "undo", "no-such-ref"), "names no commit"),
        (("memory", "undo", "--reflection", "nope"), "no change of reflection 'nope'"),
        (("memory", "undo", "--since", "2999-01-01"), "no change since"),
        (("memory", "log", "--source", "robot"), "--source 'robot': use one of"),
        (("memory", "restore", "--at", "nope"), "names no commit"),
    ):
        failed = await anyio.to_thread.run_sync(_reverie, home.root, *args, "--agent", "ada")
        assert failed.returncode != 0 and said in failed.stderr and len(failed.stderr.splitlines()) == 1, failed.stderr


def _reverie(home: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "orchestrator", *args],
        capture_output=True, text=True, env={**os.environ, "REVERIE_HOME": str(home)}, timeout=120,
    )


def _check_undone(repo: Path, before: str, undone: list[str]) -> None:
    assert git(repo, "rev-parse", "HEAD^").strip() == before
    assert git(repo, "log", "-1", "--format=%(trailers:key=Reverie-Source,valueonly)").strip() == "undo"
    for commit in undone:
        assert subprocess.run(["git", "merge-base", "--is-ancestor", commit, "HEAD"], cwd=repo).returncode == 0
    assert "green tea" not in (repo / "human.md").read_text(encoding="utf-8"), "the reflection's line is taken out"
    persona = (repo / "persona.md").read_text(encoding="utf-8")
    assert "speak slowly" in persona and "speak briefly" in persona, "later changes are kept"
    assert "🦉" in persona, "the agent's own commit is kept"


def test_an_undo_the_resolver_could_not_finish_says_which_lines_stayed() -> None:
    """V6: every front end says so in the same words; nothing when the undo is complete."""
    done = UndoOutcome("resolved", (), (), "a" * 40)
    assert kept_lines_notes(done) == []
    partial = UndoOutcome("resolved", (), (), "a" * 40, (("notes/hot.md", ("learned", "more")),))
    (note,) = kept_lines_notes(partial, "restore")
    assert note.startswith("the resolver reconciled notes/hot.md with later edits and kept 2 line(s) this restore takes out")
    assert "'learned', …" in note

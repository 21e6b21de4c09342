"""Undo and restore as new commits (H3), real git: an undo's tree is what git's own three-way merge
makes of the change taken back (``git merge-tree --write-tree`` is the oracle), the commits it takes
back stay in ``HEAD``'s history, the result passes the hook's validation, and an undo whose lines
were edited later is reconciled or kept on a branch, never dropped nor half-applied."""

from __future__ import annotations

import subprocess
from pathlib import Path

import anyio
import pytest

from orchestrator.memfs.history import changes
from orchestrator.memfs.provenance import Provenance, with_trailers
from orchestrator.memfs.undo import UndoError, plan_undo, restore_tree, undo_spans
from orchestrator.memfs.validator import audit_head
from orchestrator.models.scripted import ScriptedModel
from subagents.resolver import make_resolver
from tests.memfs.reflection_helpers import commit_file, git, make_repo, note

pytestmark = pytest.mark.anyio

REFLECTION = "20261207T230000Z-abcdef12"


def _reflection_message(subject: str) -> str:
    return with_trailers(subject, Provenance("reflection", "a", "c1", reflection=REFLECTION, trigger="manual"))


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    return make_repo(tmp_path / "memory")


def _history(repo: Path) -> tuple[str, str, str]:
    """A reflection of two commits (one edits notes/hot.md, one adds notes/learned.md) between an
    edit before it and an unrelated edit after it; returns (before the reflection, its tip, HEAD)."""
    before = commit_file(repo, "notes/a.md", note("a", "one\ntwo"), "the agent's note")
    commit_file(repo, "notes/hot.md", "---\nname: hot\ndescription: shared\n---\nbase\nlearned\n", _reflection_message("r1"))
    tip = commit_file(repo, "notes/learned.md", note("learned", "a fact"), _reflection_message("r2"))
    head = commit_file(repo, "notes/a.md", note("a", "one\ntwo\nthree"), "a later unrelated edit")
    return before, tip, head


def _oracle(repo: Path, base: str, tip: str) -> tuple[int, str]:
    """git's own answer: the undo commit made where it cannot conflict, merged with HEAD by
    ``git merge-tree --write-tree`` (their merge base is ``tip``); (exit status, tree)."""
    undo = git(repo, "commit-tree", f"{base}^{{tree}}", "-p", tip, "-m", "oracle").strip()
    said = subprocess.run(["git", "merge-tree", "--write-tree", "HEAD", undo], cwd=repo, capture_output=True, text=True)
    return said.returncode, said.stdout.split("\n", 1)[0]


def _tree(repo: Path, revision: str = "HEAD") -> str:
    return git(repo, "rev-parse", f"{revision}^{{tree}}").strip()


def _ancestor(repo: Path, commit: str) -> bool:
    return subprocess.run(["git", "merge-base", "--is-ancestor", commit, "HEAD"], cwd=repo).returncode == 0


async def test_undoing_a_reflection_takes_out_only_its_changes_as_a_new_commit(repo: Path) -> None:
    before, tip, head = await anyio.to_thread.run_sync(_history, repo)
    status, expected = await anyio.to_thread.run_sync(_oracle, repo, before, tip)
    assert status == 0
    spans = await anyio.to_thread.run_sync(lambda: plan_undo(repo, reflection=REFLECTION))
    assert [(s.base, s.tip, len(s.commits)) for s in spans] == [(before, tip, 2)]

    outcome = await undo_spans(repo, spans, agent_id="a", what=f"reflection {REFLECTION}")
    assert outcome.status == "merged" and len(outcome.commits) == 1
    await anyio.to_thread.run_sync(_check_clean_undo, repo, expected, before, tip, head)


def _check_clean_undo(repo: Path, expected: str, before: str, tip: str, head: str) -> None:
    assert _tree(repo) == expected
    assert git(repo, "rev-parse", "HEAD^").strip() == head, "one new commit on the old HEAD"
    assert all(_ancestor(repo, c) for c in (before, tip, head)), "nothing rewritten"
    assert not (repo / "notes" / "learned.md").exists()
    assert (repo / "notes" / "a.md").read_text().endswith("three\n"), "the later edit is kept"
    assert audit_head(repo).ok
    assert git(repo, "status", "--porcelain") == ""
    message = git(repo, "log", "-1", "--format=%(trailers:key=Reverie-Source,valueonly)").strip()
    assert message == "undo"
    assert changes(repo)[0].provenance.undoes.startswith(f"reflection {REFLECTION}")


async def test_an_undo_whose_lines_were_edited_later_is_kept_on_a_branch_under_keep(repo: Path) -> None:
    before, tip, _ = await anyio.to_thread.run_sync(_history, repo)
    later = await anyio.to_thread.run_sync(
        commit_file, repo, "notes/hot.md", "---\nname: hot\ndescription: shared\n---\nbase\nlearned\nand more\n", "later edit"
    )
    status, _ = await anyio.to_thread.run_sync(_oracle, repo, before, tip)
    assert status == 1, "git's own merge conflicts here too"
    spans = await anyio.to_thread.run_sync(lambda: plan_undo(repo, reflection=REFLECTION))

    outcome = await undo_spans(repo, spans, agent_id="a", what="reflection")
    assert outcome.status == "kept" and outcome.commits == ()
    await anyio.to_thread.run_sync(_check_kept, repo, outcome.kept, later, before, tip)


def _check_kept(repo: Path, kept_branches: tuple[str, ...], later: str, before: str, tip: str) -> None:
    assert git(repo, "rev-parse", "HEAD").strip() == later, "nothing half-applied"
    assert git(repo, "status", "--porcelain") == ""
    (branch,) = kept_branches
    kept = git(repo, "rev-parse", f"refs/heads/{branch}").strip()
    assert git(repo, "rev-parse", f"{kept}^").strip() == tip, "the undo is kept, built on the reflection's tip"
    assert _tree(repo, kept) == _tree(repo, before)


def _conflicted(repo: Path, base: str, tip: str) -> list[str]:
    """The paths git's own merge of the undo with ``HEAD`` leaves conflicted (``merge-tree --name-only``)."""
    undo = git(repo, "commit-tree", f"{base}^{{tree}}", "-p", tip, "-m", "oracle").strip()
    said = subprocess.run(
        ["git", "merge-tree", "--write-tree", "--name-only", "HEAD", undo], cwd=repo, capture_output=True, text=True
    )
    assert said.returncode == 1, said.stderr
    return said.stdout.split("\n\n", 1)[0].splitlines()[1:]


HOT_LATER = "---\nname: hot\ndescription: shared\n---\nbase\nlearned\nand more\n"


async def test_under_resolve_the_resolver_reconciles_it_and_nothing_is_dropped(repo: Path) -> None:
    """H3, V6: the undo meets a later edit of the file the reflection wrote; git's own merge
    conflicts on that file alone. The scripted resolver reconciles by union (every line of both
    sides), which cannot take a line out: the later edit survives and so do the lines the undo
    meant to remove, and the outcome names them, while the file without a conflict is undone."""
    before, tip, _ = await anyio.to_thread.run_sync(_history, repo)
    later = await anyio.to_thread.run_sync(commit_file, repo, "notes/hot.md", HOT_LATER, "later edit")
    assert await anyio.to_thread.run_sync(_conflicted, repo, before, tip) == ["notes/hot.md"]
    spans = await anyio.to_thread.run_sync(lambda: plan_undo(repo, reflection=REFLECTION))

    outcome = await undo_spans(repo, spans, agent_id="a", what="reflection", resolver=make_resolver(ScriptedModel(), agent_id="a"))
    assert outcome.status == "resolved"
    assert [m.resolved_files for m in outcome.merges] == [("notes/hot.md",)]
    assert outcome.kept_lines == (("notes/hot.md", ("learned",)),), "the one line the undo takes out is back"
    await anyio.to_thread.run_sync(_check_resolved, repo, later)


def _check_resolved(repo: Path, later: str) -> None:
    assert _ancestor(repo, later)
    assert (repo / "notes" / "hot.md").read_text() == HOT_LATER, "the union: the later edit whole, the undone lines too"
    assert not (repo / "notes" / "learned.md").exists(), "the part that did not conflict is undone"
    assert git(repo, "log", "-1", "--format=%(trailers:key=Reverie-Source,valueonly)").strip() == "resolver"
    assert audit_head(repo).ok


async def test_restore_makes_the_old_tree_a_new_commit(repo: Path) -> None:
    before, _, head = await anyio.to_thread.run_sync(_history, repo)

    outcome = await restore_tree(repo, before, agent_id="a")
    assert outcome.status == "merged"
    await anyio.to_thread.run_sync(_check_restored, repo, before, head)


def _check_restored(repo: Path, before: str, head: str) -> None:
    assert _tree(repo) == _tree(repo, before)
    assert git(repo, "rev-parse", "HEAD^").strip() == head
    assert git(repo, "log", "-1", "--format=%(trailers:key=Reverie-Source,valueonly)").strip() == "restore"


async def test_bad_requests_are_one_line_each(repo: Path) -> None:
    await anyio.to_thread.run_sync(_history, repo)
    root = (await anyio.to_thread.run_sync(git, repo, "rev-list", "--max-parents=0", "HEAD")).strip()
    for kwargs, said in (
        ({"revision": "no-such-ref"}, "'no-such-ref' names no commit"),
        ({"reflection": "nope"}, "no change of reflection 'nope'"),
        ({"since": "2999-01-01"}, "no change since '2999-01-01'"),
        ({"revision": root}, "first commit; use `reverie memory restore`"),
        ({}, "give exactly one of"),
    ):
        with pytest.raises(UndoError) as caught:
            await anyio.to_thread.run_sync(lambda kw=kwargs: plan_undo(repo, **kw))
        assert said in str(caught.value) and "\n" not in str(caught.value)
    with pytest.raises(UndoError, match="names no commit"):
        await restore_tree(repo, "no-such-ref", agent_id="a")

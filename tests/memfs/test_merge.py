from __future__ import annotations

from pathlib import Path

import anyio
import anyio.abc
import anyio.to_thread
import pytest
from anyio import create_task_group

from orchestrator.agent.reminders import (
    MEMORY_INVALID_TEMPLATE,
    REFLECTION_KEPT_TEMPLATE,
    memory_invalid_reminder,
    reflection_kept_reminder,
)
from orchestrator.app.stress import run_stress
from orchestrator.app.stress_report import StressConfig
from orchestrator.memfs.merge import (
    REASON_CONFLICT,
    REASON_DIRTY,
    REASON_FAILED,
    REASON_INVALID,
    MergeOutcome,
    discard_branch,
    finalize_worktree,
    merge_back,
    merge_branch,
)
from orchestrator.memfs.resolution import Conflict
from orchestrator.memfs.worktrees import create_worktree, list_reflections
from tests.memfs.reflection_helpers import commit_file, git, make_repo, note, reachable, write

S12_KEPT = """<system-reminder>
MEMORY REFLECTION KEPT: a background reflection made {n} commit(s) that were not merged into your memory ({reason}).
Nothing was lost: they are on branch {branch}.
Files involved: {files}
When it suits the user's work, run `reverie reflections merge {id}` to retry, or review them with `git -C "$MEMORY_DIR" log -p {branch}` and apply what still matters yourself. Do not delete the branch.
</system-reminder>"""

S12_INVALID = """<system-reminder>
MEMORY INVALID: the committed memory at {sha7} fails validation:
{errors}
Fix these files and commit the fix, staging only the files you changed.
</system-reminder>"""


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    return make_repo(tmp_path / "memory")


async def _git(cwd: Path, *args: str) -> str:
    return await anyio.to_thread.run_sync(lambda: git(cwd, *args))


async def _commit(cwd: Path, rel: str, text: str, msg: str) -> str:
    return await anyio.to_thread.run_sync(commit_file, cwd, rel, text, msg)


def test_templates_are_s12_byte_exact() -> None:
    assert REFLECTION_KEPT_TEMPLATE == S12_KEPT
    assert MEMORY_INVALID_TEMPLATE == S12_INVALID


def test_reminder_texts() -> None:
    outcome = MergeOutcome("kept", REASON_CONFLICT, "reverie/reflection/X", ("a", "b"), ("notes/hot.md", "human.md"), "h")
    text = reflection_kept_reminder(
        n=outcome.commit_count, reason=outcome.reason or "", branch=outcome.branch, files=outcome.files, id="X"
    )
    assert text == (
        "<system-reminder>\n"
        "MEMORY REFLECTION KEPT: a background reflection made 2 commit(s) that were not merged into your memory"
        " (conflicts with newer memory changes).\n"
        "Nothing was lost: they are on branch reverie/reflection/X.\n"
        "Files involved: notes/hot.md, human.md\n"
        "When it suits the user's work, run `reverie reflections merge X` to retry, or review them with "
        '`git -C "$MEMORY_DIR" log -p reverie/reflection/X` and apply what still matters yourself. '
        "Do not delete the branch.\n"
        "</system-reminder>"
    )
    assert memory_invalid_reminder("abc1234", ["a.md: bad", "b.md: worse"]) == (
        "<system-reminder>\n"
        "MEMORY INVALID: the committed memory at abc1234 fails validation:\n"
        "  a.md: bad\n  b.md: worse\n"
        "Fix these files and commit the fix, staging only the files you changed.\n"
        "</system-reminder>"
    )
    assert REASON_DIRTY == "the memory repository had uncommitted changes"
    assert REASON_FAILED == "the reflection failed before finishing"


@pytest.mark.anyio
async def test_clean_merge_fast_forwards_when_parent_did_not_move(repo: Path) -> None:
    wt = await create_worktree(repo, agent_id="a")
    sha = await _commit(wt.path, "notes/r.md", note("r", "learned"), "reflect")
    outcome = await finalize_worktree(repo, wt)
    assert (outcome.status, outcome.commits, outcome.files, outcome.new_head) == ("merged", (sha,), ("notes/r.md",), sha)
    assert (await _git(repo, "rev-parse", "HEAD")).strip() == sha
    assert await anyio.Path(repo / "notes" / "r.md").exists()
    assert (await _git(repo, "status", "--porcelain")) == ""
    assert await list_reflections(repo) == ()
    assert not await anyio.Path(wt.path).exists()


@pytest.mark.anyio
async def test_merge_rebases_onto_moved_parent(repo: Path) -> None:
    wt = await create_worktree(repo, agent_id="a")
    old = await _commit(wt.path, "notes/r.md", note("r", "learned"), "reflect")
    main = await _commit(repo, "notes/m.md", note("m", "main"), "main work")
    outcome = await finalize_worktree(repo, wt)
    assert outcome.status == "merged"
    (new,) = outcome.commits
    assert outcome.rewritten == ((old, new),)
    log = (await _git(repo, "log", "--format=%H %s")).splitlines()
    assert log[0] == f"{new} reflect" and log[1] == f"{main} main work"
    assert (await _git(repo, "rev-list", "--merges", "HEAD")) == ""
    assert (await _git(repo, "status", "--porcelain")) == ""


@pytest.mark.anyio
async def test_conflict_keeps_branch_names_files_and_loses_nothing(repo: Path) -> None:
    wt = await create_worktree(repo, agent_id="a")
    r1 = await _commit(wt.path, "notes/hot.md", note("hot", "reflection says"), "r1")
    r2 = await _commit(wt.path, "notes/other.md", note("other", "x"), "r2")
    main = await _commit(repo, "notes/hot.md", note("hot", "agent says"), "main")
    outcome = await finalize_worktree(repo, wt)
    assert outcome.status == "kept" and outcome.reason == REASON_CONFLICT
    assert outcome.files == ("notes/hot.md",)
    assert outcome.commits == (r1, r2)
    assert (await _git(repo, "rev-parse", "HEAD")).strip() == main
    assert (await _git(repo, "rev-parse", wt.branch)).strip() == r2
    for sha in (r1, r2, main):
        assert await anyio.to_thread.run_sync(reachable, repo, sha)
    assert (await _git(repo, "status", "--porcelain")) == ""
    assert not await anyio.Path(wt.path).exists()
    (kept,) = await list_reflections(repo)
    assert (kept.branch, kept.ahead, kept.merged) == (wt.branch, 2, False)
    assert outcome.reason_code == "conflict" and outcome.commit_count == 2
    refs = await _git(repo, "for-each-ref", "refs/reverie/")
    assert refs == ""


@pytest.mark.anyio
async def test_dirty_checkout_elsewhere_does_not_stop_the_merge(repo: Path) -> None:
    wt = await create_worktree(repo, agent_id="a")
    sha = await _commit(wt.path, "notes/r.md", note("r", "x"), "reflect")
    await anyio.to_thread.run_sync(write, repo / "human.md", note("human", "half-typed"))
    outcome = await finalize_worktree(repo, wt)
    assert (outcome.status, outcome.commits, outcome.new_head) == ("merged", (sha,), sha)
    assert await anyio.Path(repo / "human.md").read_text() == note("human", "half-typed")
    assert (await _git(repo, "status", "--porcelain")).strip() == "M human.md"


@pytest.mark.anyio
async def test_dirty_touched_path_delays_but_does_not_keep(repo: Path) -> None:
    wt = await create_worktree(repo, agent_id="a")
    sha = await _commit(wt.path, "notes/r.md", note("r", "x"), "reflect")
    await anyio.to_thread.run_sync(write, repo / "notes" / "r.md", note("r", "typed by the agent"))
    outcome = await finalize_worktree(repo, wt)
    assert (outcome.status, outcome.reason, outcome.reason_code) == ("pending", REASON_DIRTY, "dirty")
    assert outcome.commits == (sha,) and outcome.files == ("notes/r.md",)
    assert await anyio.Path(repo / "notes" / "r.md").read_text() == note("r", "typed by the agent")
    (waiting,) = await list_reflections(repo)
    assert waiting.branch == wt.branch and not waiting.merged
    # Once the agent's edit is gone, the retry merges.
    await anyio.to_thread.run_sync(lambda: (repo / "notes" / "r.md").unlink())
    retried = await merge_branch(repo, wt.id)
    assert retried.status == "merged"
    assert await list_reflections(repo) == ()
    assert (await _git(repo, "status", "--porcelain")) == ""
    assert (await _git(repo, "for-each-ref", "refs/reverie/")) == ""


@pytest.mark.anyio
async def test_failed_run_with_commits_is_kept_without_merging(repo: Path) -> None:
    wt = await create_worktree(repo, agent_id="a")
    head = (await _git(repo, "rev-parse", "HEAD")).strip()
    sha = await _commit(wt.path, "notes/r.md", note("r", "partial"), "partial")
    outcome = await finalize_worktree(repo, wt, succeeded=False)
    assert (outcome.status, outcome.reason, outcome.commits) == ("kept", REASON_FAILED, (sha,))
    assert (await _git(repo, "rev-parse", "HEAD")).strip() == head
    dropped = await discard_branch(repo, wt.id)
    assert dropped == (sha,)
    assert await list_reflections(repo) == ()


@pytest.mark.anyio
async def test_no_commits_removes_everything(repo: Path) -> None:
    wt = await create_worktree(repo, agent_id="a")
    await anyio.to_thread.run_sync(write, wt.path / "notes" / "stray.md", "uncommitted")
    outcome = await finalize_worktree(repo, wt)
    assert outcome.status == "no_changes" and outcome.commits == ()
    assert await list_reflections(repo) == ()
    assert (await _git(repo, "status", "--porcelain")) == ""


@pytest.mark.anyio
async def test_invalid_candidate_is_kept_with_errors(repo: Path) -> None:
    wt = await create_worktree(repo, agent_id="a")
    await _commit(wt.path, "notes/bad.md", "no frontmatter\n", "bad")
    outcome = await finalize_worktree(repo, wt)
    assert (outcome.status, outcome.reason) == ("kept", REASON_INVALID)
    assert any("notes/bad.md" in e for e in outcome.errors)
    assert not await anyio.Path(repo / "notes" / "bad.md").exists()


@pytest.mark.anyio
async def test_concurrent_merges_are_serialised(repo: Path) -> None:
    active = 0
    peak = 0

    async def counting_audit(checkout: Path, revision: str, base: str | None) -> tuple[str, ...]:
        nonlocal active, peak
        active += 1
        peak = max(peak, active)
        await anyio.sleep(0.02)  # a slow audit: the window in which a second merge would overlap
        active -= 1
        return ()

    trees = [await create_worktree(repo, agent_id="a") for _ in range(4)]
    shas = [await _commit(wt.path, f"notes/w{i}.md", note(f"w{i}", "x"), f"w{i}") for i, wt in enumerate(trees)]
    outcomes: list[MergeOutcome] = []

    async def run(i: int) -> None:
        outcomes.append(await merge_back(repo, trees[i].path, trees[i].branch, audit=counting_audit))

    async with create_task_group() as tg:
        for i in range(4):
            tg.start_soon(run, i)
    assert peak == 1
    assert sorted(o.status for o in outcomes) == ["merged"] * 4
    subjects = set((await _git(repo, "log", "--format=%s")).split())
    assert {"w0", "w1", "w2", "w3"} <= subjects
    assert len(shas) == 4


@pytest.mark.anyio
async def test_head_moving_during_every_attempt_still_merges(repo: Path) -> None:
    """An outside process commits between the rebase and the fast-forward of ten attempts in a row
    (more than the old three); merge-back starts over under the lock and merges."""
    wt = await create_worktree(repo, agent_id="a")
    await _commit(wt.path, "notes/r.md", note("r", "learned"), "reflect")
    moves: list[str] = []

    async def moving_audit(checkout: Path, revision: str, base: str | None) -> tuple[str, ...]:
        if len(moves) < 10:
            moves.append(await _commit(repo, "notes/m.md", note("m", f"main {len(moves)}"), f"main {len(moves)}"))
        return ()

    outcome = await merge_back(repo, wt.path, wt.branch, audit=moving_audit)
    assert (outcome.status, outcome.retried) == ("merged", 10)
    head = (await _git(repo, "rev-parse", "HEAD")).strip()
    assert head == outcome.new_head
    for sha in moves:
        assert (await anyio.to_thread.run_sync(lambda s=sha: git(repo, "merge-base", "--is-ancestor", s, "HEAD"))) == ""
    assert (await _git(repo, "log", "-1", "--format=%s")).strip() == "reflect"
    assert (await _git(repo, "for-each-ref", "refs/reverie/")) == ""


@pytest.mark.anyio
async def test_head_that_never_stops_moving_leaves_the_branch_pending(repo: Path) -> None:
    wt = await create_worktree(repo, agent_id="a")
    sha = await _commit(wt.path, "notes/r.md", note("r", "learned"), "reflect")
    count = 0

    async def always_moving(checkout: Path, revision: str, base: str | None) -> tuple[str, ...]:
        nonlocal count
        count += 1
        await _commit(repo, "notes/m.md", note("m", f"main {count}"), f"main {count}")
        return ()

    outcome = await merge_back(repo, wt.path, wt.branch, audit=always_moving)
    assert (outcome.status, outcome.reason_code) == ("pending", "busy")
    assert len(outcome.commits) == 1
    assert await anyio.to_thread.run_sync(reachable, repo, sha) or outcome.rewritten
    assert (await _git(repo, "for-each-ref", "refs/reverie/")) == ""



@pytest.mark.anyio
async def test_finalize_retry_after_an_in_memory_rebase_runs_gits_rebase_on_an_up_to_date_worktree(
    repo: Path,
) -> None:
    """finalize_worktree rebases in memory without checking the doomed worktree out; when HEAD then
    moves so that only git's own rebase can replay the branch (a conflict), that rebase must find
    the worktree matching its branch, so the conflict reaches the resolver and the commit lands."""
    wt = await create_worktree(repo, agent_id="a")
    await _commit(wt.path, "notes/r.md", note("r", "learned"), "reflect")
    await _commit(repo, "notes/m.md", note("m", "main"), "main moved")
    audits: list[str] = []
    conflicts: list[tuple[str, ...]] = []

    async def conflicting_audit(checkout: Path, revision: str, base: str | None) -> tuple[str, ...]:
        if not audits:
            await _commit(repo, "notes/r.md", note("r", "upstream"), "conflicting change upstream")
        audits.append(revision)
        return ()

    async def resolver(conflict: Conflict) -> None:
        conflicts.append(conflict.files)
        for rel in conflict.files:
            await anyio.to_thread.run_sync(write, conflict.worktree / rel, note("r", "learned and upstream"))
            await _git(conflict.worktree, "add", rel)

    outcome = await finalize_worktree(repo, wt, audit=conflicting_audit, resolver=resolver)
    assert (outcome.status, outcome.retried, conflicts) == ("resolved", 1, [("notes/r.md",)])
    assert (await _git(repo, "rev-parse", "HEAD")).strip() == outcome.new_head
    assert (await _git(repo, "log", "-1", "--format=%s")).strip() == "reflect"
    assert "learned and upstream" in (repo / "notes/r.md").read_text()
    assert not wt.path.exists()
    assert (await _git(repo, "for-each-ref", "refs/reverie/", "refs/heads/reverie/")) == ""


@pytest.mark.anyio
async def test_a_branch_whose_change_is_already_upstream_has_no_changes(repo: Path) -> None:
    """git rebase drops a commit whose patch HEAD already has: nothing to merge, nothing lost."""
    wt = await create_worktree(repo, agent_id="a")
    old = await _commit(wt.path, "notes/r.md", note("r", "learned"), "reflect")
    await _git(repo, "cherry-pick", old)
    await _commit(repo, "notes/m.md", note("m", "main"), "main work")
    outcome = await finalize_worktree(repo, wt)
    assert outcome.status == "no_changes"
    assert "learned" in await _git(repo, "show", "HEAD:notes/r.md")
    assert (await _git(repo, "for-each-ref", "refs/reverie/")) == ""
    assert (await _git(repo, "status", "--porcelain")) == ""


_BYPASS = r"""
repo=$1; stop=$2; n=0; ok=0
until /usr/bin/git -C "$repo" rev-parse -q --verify HEAD >/dev/null 2>&1; do sleep 0.05; done
echo ready
while [ ! -e "$stop" ]; do
  printf -- '---\nname: bypass\ndescription: bypass note\n---\nb%s\n' $n > "$repo/../bypass.tmp"
  mv "$repo/../bypass.tmp" "$repo/notes/bypass.md"
  /usr/bin/git -C "$repo" add notes/bypass.md 2>/dev/null
  /usr/bin/git -C "$repo" -c user.name=bypass -c user.email=b@b commit -q -a --no-verify -m "bypass $n" >/dev/null 2>&1 && ok=$((ok+1))
  n=$((n+1)); sleep 0.1
done
echo "ok $ok"
"""


@pytest.mark.anyio
@pytest.mark.parametrize("anyio_backend", ["trio"])  # ~15 s of git work; the race is git's, not the loop's
async def test_a_git_that_skips_the_wrapper_beside_a_stress_run_is_folded_in_never_swept(tmp_path: Path) -> None:
    """A4: a committer calling ``/usr/bin/git`` directly (no wrapper, no lock, ``commit
    -a``) beside ``reverie stress`` with no shared files: nothing kept, so no kept branch that git
    would merge cleanly; no writer's content in the bypass's or the main writer's commits; every
    bypass commit in ``HEAD``. The bypass skips the hook so each of its commits holds ``index.lock``
    for milliseconds (the stress's own main writer retries a held lock for ~6 s only), and replaces
    its file whole: the main writer's ``commit -a`` may take the bypass's uncommitted edit, which
    must then be a valid file."""
    work, stop = tmp_path / "stress", tmp_path / "stop"
    repo = work / "memory"
    work.mkdir()
    config = StressConfig(writers=8, commits=10, conflict_rate=0.0)
    async with await anyio.open_process(["bash", "-c", _BYPASS, "bypass", str(repo), str(stop)]) as bypass:
        assert bypass.stdout is not None
        try:
            report = await run_stress(config, workdir=work)
        finally:
            await anyio.Path(stop).touch()
        said = (await _read_all(bypass.stdout)).split()
        await bypass.wait()
    assert said[0] == "ready" and said[-2] == "ok"
    bypassed = int(said[-1])
    kept = (await _git(repo, "for-each-ref", "--format=%(refname:short)", "refs/heads/reverie/")).split()
    clean = [b for b in kept if (await anyio.run_process(["git", "merge-tree", "--write-tree", "HEAD", b], cwd=repo, check=False)).returncode == 0]
    assert (report.kept, report.lost, report.pending, clean) == (0, 0, 0, [])
    swept = []
    for line in (await _git(repo, "log", "--no-merges", "--format=%H %s", "HEAD")).splitlines():
        sha, subject = line.split(" ", 1)
        if subject.startswith(("bypass", "main commit")):
            files = (await _git(repo, "diff-tree", "--no-commit-id", "--name-only", "-r", sha)).split()
            swept += [f"{subject}: {f}" for f in files if f.startswith("notes/writer-")]
    assert swept == []
    in_head = [s for s in (await _git(repo, "log", "--format=%s", "HEAD")).splitlines() if s.startswith("bypass ")]
    assert bypassed > 0 and len(in_head) == bypassed


async def _read_all(stream: anyio.abc.ByteReceiveStream) -> str:
    chunks = [chunk async for chunk in stream]
    return b"".join(chunks).decode()


async def _stuck_rebase(repo: Path) -> tuple[Path, str, list[tuple[str, str]]]:
    """A worktree whose branch (w0..w3, two of them on the hot file) is left mid-rebase onto a moved
    ``HEAD``, as a merge leaves it when a full disk made ``rebase --abort`` fail too: w0's conflict
    resolved and w0, w1 replayed onto ``HEAD`` (detached), stopped on w2's conflict. Returns the
    worktree, its branch and the original ``(commit, message)`` pairs."""
    wt = await create_worktree(repo, agent_id="a")
    originals = []
    for i in range(4):
        rel, name = ("notes/hot.md", "hot") if i % 2 == 0 else (f"notes/w{i}.md", f"w{i}")
        originals.append((await _commit(wt.path, rel, note(name, f"branch {i}"), f"w{i}"), f"w{i}"))
    await _commit(repo, "notes/hot.md", note("hot", "main moved"), "main moves on")
    head = (await _git(repo, "rev-parse", "HEAD")).strip()
    stopped = await anyio.run_process(["git", "rebase", "-q", head], cwd=wt.path, check=False)
    assert stopped.returncode != 0
    await anyio.to_thread.run_sync(write, wt.path / "notes/hot.md", note("hot", "main moved, branch 0"))
    await _git(wt.path, "add", "notes/hot.md")
    again = await anyio.run_process(
        ["git", "-c", "core.editor=true", "rebase", "--continue"], cwd=wt.path, check=False
    )
    assert again.returncode != 0 and (wt.path / ".git").is_file()
    assert "w1" in await _git(wt.path, "log", "-1", "--format=%s")
    return wt.path, wt.branch, originals


async def _by_message(repo: Path, rev: str) -> dict[str, list[str]]:
    """``message -> [files the commit changes]`` for each commit of ``main..rev`` or ``rev``."""
    found: dict[str, list[str]] = {}
    for line in (await _git(repo, "log", "--format=%H %s", rev)).splitlines():
        sha, subject = line.split(" ", 1)
        files = (await _git(repo, "diff-tree", "--no-commit-id", "--name-only", "-r", sha)).split()
        found.setdefault(subject, []).extend(files)
    return found


@pytest.mark.anyio
@pytest.mark.parametrize("policy", ["keep", "resolve"])
async def test_a_rebase_left_in_progress_is_aborted_before_the_branch_merges_again(repo: Path, policy: str) -> None:
    """O9: a merge whose rebase (and its abort) failed on a full disk left the worktree mid-rebase.
    The next merge-back must start from the branch as committed, not from the rebase's detached
    ``HEAD``: every commit merged (or kept) once, each with its own change, none folded into another."""
    worktree, branch, originals = await _stuck_rebase(repo)

    async def resolver(conflict: Conflict) -> None:
        for rel in conflict.files:
            await anyio.to_thread.run_sync(write, conflict.worktree / rel, note("hot", f"resolved {conflict.subject}"))
            await _git(conflict.worktree, "add", rel)

    outcome = await merge_back(repo, worktree, branch, resolver=resolver if policy == "resolve" else None)
    assert not (await _git(worktree, "status")).startswith("interactive rebase in progress")
    expected = {"w0": ["notes/hot.md"], "w1": ["notes/w1.md"], "w2": ["notes/hot.md"], "w3": ["notes/w3.md"]}
    if policy == "keep":
        assert (outcome.status, outcome.reason_code) == ("kept", "conflict")
        assert outcome.commits == tuple(sha for sha, _ in originals)
        assert (await _git(repo, "rev-parse", branch)).strip() == originals[-1][0]
        assert (await _git(repo, "log", "-1", "--format=%s", "main")).strip() == "main moves on"
    else:
        assert outcome.status == "resolved" and outcome.commit_count == 4
        merged = await _by_message(repo, "main")
        assert {m: merged.get(m) for m in expected} == expected
    assert (await _git(repo, "status", "--porcelain")) == ""


@pytest.mark.anyio
async def test_a_branch_whose_worktree_is_left_mid_rebase_merges_there(repo: Path) -> None:
    """``reverie reflections merge`` (and the stress's re-queue) on a branch whose worktree a full
    disk left mid-rebase: git counts the branch as checked out there, so a temporary worktree for it
    is refused ("already checked out"); the branch's own worktree is used and its rebase aborted."""
    worktree, branch, originals = await _stuck_rebase(repo)
    outcome = await merge_branch(repo, branch)
    assert (outcome.status, outcome.commits) == ("kept", tuple(sha for sha, _ in originals))
    assert not (await _git(worktree, "status")).startswith("interactive rebase in progress")
    assert (await _git(worktree, "rev-parse", "--abbrev-ref", "HEAD")).strip() == branch


@pytest.mark.anyio
async def test_a_worktree_left_detached_merges_the_branch_as_committed(repo: Path) -> None:
    """A rebase dropped with ``--quit`` whose checkout of the branch then failed (a full disk) leaves
    the worktree detached on the copies replayed so far: the next merge-back checks the branch out
    again and merges all its commits, not the detached copy (O7: 1 of 5 merged)."""
    wt = await create_worktree(repo, agent_id="a")
    for i in range(3):
        await _commit(wt.path, f"notes/w{i}.md", note(f"w{i}", "x"), f"w{i}")
    await _commit(repo, "notes/m.md", note("m", "main"), "main moves on")
    first = (await _git(wt.path, "rev-list", "--reverse", "HEAD~3..HEAD")).split()[0]
    await _git(wt.path, "checkout", "-q", "--detach", "main")
    await _git(wt.path, "cherry-pick", first)
    outcome = await merge_back(repo, wt.path, wt.branch)
    assert (outcome.status, outcome.commit_count) == ("merged", 3)
    assert [s for s in (await _git(repo, "log", "-3", "--format=%s")).split()] == ["w2", "w1", "w0"]


def _append(path: Path, text: str) -> None:
    with path.open("a", encoding="utf-8") as out:
        out.write(text)


def _hot_lines(*lines: str) -> str:
    return "---\nname: hot\ndescription: shared\n---\n" + "".join(f"{line}\n" for line in lines)


@pytest.mark.anyio
async def test_a_resolver_that_appends_to_its_rebases_todo_runs_nothing_and_keeps_the_branch(
    repo: Path, tmp_path: Path
) -> None:
    """No sandbox here (a resolver that is plain code): reverie itself checks the rebase's state
    against what its git left before ``--continue`` (memfs.operations), so the ``exec`` line is
    never run, the merge is not ``resolved`` and the branch keeps its commits."""
    wt = await create_worktree(repo, agent_id="a")
    r1 = await _commit(wt.path, "notes/hot.md", _hot_lines("base", "branch"), "r1")
    head = await _commit(repo, "notes/hot.md", _hot_lines("base", "agent"), "main")
    marker = tmp_path / "pwned"

    async def resolver(conflict: Conflict) -> None:
        todo = (await _git(conflict.worktree, "rev-parse", "--path-format=absolute", "--git-path", "rebase-merge/git-rebase-todo")).strip()
        await anyio.to_thread.run_sync(lambda: _append(Path(todo), f"exec touch {marker}\n"))
        await anyio.to_thread.run_sync(write, conflict.worktree / "notes/hot.md", _hot_lines("base", "agent", "branch"))
        await _git(conflict.worktree, "add", "notes/hot.md")

    outcome = await finalize_worktree(repo, wt, resolver=resolver)
    assert not marker.exists()
    assert (outcome.status, outcome.reason_code, outcome.commits) == ("kept", "conflict", (r1,))
    assert outcome.reason is not None and "rebase's own state" in outcome.reason
    assert (await _git(repo, "rev-parse", wt.branch)).strip() == r1
    assert (await _git(repo, "rev-parse", "main")).strip() == head
    assert (await _git(repo, "for-each-ref", "refs/reverie/")) == ""


@pytest.mark.anyio
async def test_a_rebase_planted_in_a_reflection_worktree_is_dropped_unread_not_aborted(repo: Path, tmp_path: Path) -> None:
    """``git rebase --abort`` resets the branch a state's ``head-name`` names to its ``orig-head``:
    a state reverie's git did not leave is dropped instead, so ``main`` stays and nothing runs."""
    first = (await _git(repo, "rev-list", "--max-parents=0", "HEAD")).strip()
    head = (await _git(repo, "rev-parse", "HEAD")).strip()
    wt = await create_worktree(repo, agent_id="a")
    r1 = await _commit(wt.path, "notes/w.md", note("w", "x"), "r1")
    state = Path((await _git(wt.path, "rev-parse", "--path-format=absolute", "--git-dir")).strip()) / "rebase-merge"
    state.mkdir()
    marker = tmp_path / "pwned"
    for name, text in (
        ("git-rebase-todo", f"exec touch {marker}\n"), ("head-name", "refs/heads/main\n"),
        ("orig-head", first + "\n"), ("onto", first + "\n"), ("interactive", ""),
    ):
        (state / name).write_text(text, encoding="utf-8")
    outcome = await finalize_worktree(repo, wt)
    assert outcome.status == "merged" and not marker.exists()
    assert (await _git(repo, "rev-list", "--max-count=2", "main")).split() == [r1, head]

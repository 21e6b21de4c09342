"""D2 outcomes as the agent sees them: records, events, retries (real git, the real store)."""

from __future__ import annotations

from pathlib import Path

import anyio
import anyio.to_thread
import pytest

from orchestrator.app.session import ChatSession
from orchestrator.base.events import Event
from orchestrator.base.subagent_events import ReflectionOutcome
from orchestrator.memfs.merge import finalize_worktree
from orchestrator.memfs.worktrees import create_worktree, list_reflections
from orchestrator.store import ReflectionRecord, utc_now
from subagents.reflection_merge import PENDING_REMINDER_TURNS, settle
from tests.memfs.reflection_helpers import commit_file, git

pytestmark = pytest.mark.anyio


class Seen:
    def __init__(self) -> None:
        self.events: list[Event] = []

    async def __call__(self, event: Event) -> None:
        self.events.append(event)

    def outcomes(self) -> list[ReflectionOutcome]:
        return [e for e in self.events if isinstance(e, ReflectionOutcome)]


async def _git(cwd: Path, *args: str) -> str:
    return await anyio.to_thread.run_sync(lambda: git(cwd, *args))


def _human(body: str) -> str:
    return f"---\nname: human\ndescription: What I know about the person I work with\n---\n{body}\n"


def _record(session: ChatSession, wt_id: str, branch: str) -> ReflectionRecord:
    return ReflectionRecord(
        id=wt_id,
        agent_id=session.agent.agent_id,
        conversation_id=session.conversation_id,
        branch=branch,
        trigger="manual",
        status="running",
        reason=None,
        base_revision=None,
        through_seq=0,
        commits=(),
        files=(),
        created_at=utc_now(),
        updated_at=utc_now(),
    )


async def test_kept_branch_merges_once_the_conflicting_edit_is_reverted(tmp_path: Path) -> None:
    seen = Seen()
    async with ChatSession.open(agent_id="k1", workspace=tmp_path, cli={"reflection_merge": "keep"}, observer=seen) as s:
        memory = s.agent.memory_dir
        wt = await create_worktree(memory, agent_id="k1")
        await anyio.to_thread.run_sync(commit_file, wt.path, "human.md", _human("Prefers tea."), "reflection")
        await anyio.to_thread.run_sync(commit_file, memory, "human.md", _human("Prefers coffee."), "agent")
        kept = await finalize_worktree(memory, wt)
        saved = await settle(s.runtime.store, s.reflection._emit, _record(s, wt.id, wt.branch), kept)
        head = (await _git(memory, "rev-parse", "HEAD")).strip()
        assert (saved.status, saved.reason_code, saved.kept_head) == ("kept_conflict", "conflict", head)
        # HEAD has not moved: a real conflict stays kept, nothing is retried.
        assert await s.reflection.retrier.retry() == []
        await _git(memory, "revert", "--no-edit", "HEAD")
        (done,) = await s.reflection.retrier.retry()
        assert done.status == "merged"
        assert "Prefers tea." in await anyio.Path(memory / "human.md").read_text()
        assert await list_reflections(memory) == ()
        (stored,) = await s.runtime.store.reflections("k1")
        assert stored.status == "merged"
    assert [o.outcome for o in seen.outcomes()] == ["kept"], "one outcome per launch, the first settlement"
    assert "reflection.merged" in [e.kind for e in seen.events]


async def test_dirty_touched_path_is_pending_then_merges_at_a_later_turn_end(tmp_path: Path) -> None:
    seen = Seen()
    async with ChatSession.open(agent_id="p1", workspace=tmp_path, observer=seen) as s:
        memory = s.agent.memory_dir
        wt = await create_worktree(memory, agent_id="p1")
        await anyio.to_thread.run_sync(commit_file, wt.path, "human.md", _human("Prefers tea."), "reflection")
        await anyio.to_thread.run_sync(lambda: (memory / "human.md").write_text(_human("typing..."), encoding="utf-8"))
        pending = await finalize_worktree(memory, wt)
        saved = await settle(s.runtime.store, s.reflection._emit, _record(s, wt.id, wt.branch), pending)
        assert (saved.status, saved.reason_code) == ("pending", "dirty")
        for turn in range(1, PENDING_REMINDER_TURNS + 1):
            (still,) = await s.reflection.retrier.retry()
            assert (still.status, still.pending_turns) == ("pending", turn)
        assert seen.outcomes() == []
        await _git(memory, "checkout", "--", "human.md")
        (done,) = await s.reflection.retrier.retry()
        assert done.status == "merged"
        assert await anyio.Path(memory / "human.md").read_text() == _human("Prefers tea.")
    assert [o.outcome for o in seen.outcomes()] == ["merged"]


@pytest.mark.slow
async def test_every_launch_of_a_sweep_has_exactly_one_outcome(tmp_path: Path) -> None:
    """Bounded sweep: a reflection after every turn, while the agent itself keeps committing to the
    same file (so outcomes mix merged, resolved and no_changes); each launch settles exactly once."""
    seen = Seen()
    cli = {"reflection_trigger": "step-count", "reflection_step_count": 1}
    async with ChatSession.open(agent_id="w1", workspace=tmp_path, cli=cli, observer=seen) as s:
        for n in range(30):
            text = f"remember: my lucky number is {n}" if n % 3 == 0 else f"I like colour number {n}"
            await s.send(text)
            assert await s.supervisor.drain(60)
        records = await s.runtime.store.reflections("w1")
    launched = [e.reflection_id for e in seen.events if e.kind == "reflection.launch"]  # type: ignore[attr-defined]
    assert len(launched) >= 28
    by_id: dict[str, list[str]] = {}
    for outcome in seen.outcomes():
        by_id.setdefault(outcome.reflection_id, []).append(outcome.outcome)
    assert sorted(by_id) == sorted(launched)
    assert all(len(v) == 1 for v in by_id.values()), by_id
    settled = {r.id: r.status for r in records}
    assert all(settled[i] not in {"running", "pending"} for i in launched), settled
    assert {v[0] for v in by_id.values()} <= {"merged", "resolved", "no_changes"}


async def test_commits_a_git_outside_the_wrapper_made_during_the_merge_are_an_event(tmp_path: Path) -> None:
    """A4: a commit that reaches HEAD while merge-back holds the lock (a git called without
    reverie's wrapper) is folded in and named in a stored ``reflection.bypassed`` event."""
    seen = Seen()
    async with ChatSession.open(agent_id="b1", workspace=tmp_path, observer=seen) as s:
        memory = s.agent.memory_dir
        wt = await create_worktree(memory, agent_id="b1")
        await anyio.to_thread.run_sync(commit_file, wt.path, "notes/r.md", _note("r", "learned"), "reflection")
        await anyio.to_thread.run_sync(commit_file, memory, "notes/m.md", _note("m", "agent"), "agent")
        bypass: list[str] = []

        async def audit_beside_a_bypassing_git(checkout: Path, revision: str, base: str | None) -> tuple[str, ...]:
            if not bypass:
                # Plain git in the memory checkout while the merge holds the lock: no wrapper, no lock.
                sha = await anyio.to_thread.run_sync(commit_file, memory, "notes/b.md", _note("b", "x"), "bypass")
                bypass.append(sha)
            return ()

        outcome = await finalize_worktree(memory, wt, audit=audit_beside_a_bypassing_git)
        assert (outcome.status, outcome.bypassed) == ("merged", tuple(bypass))
        await settle(s.runtime.store, s.reflection._emit, _record(s, wt.id, wt.branch), outcome)
        stored = await s.runtime.store.events(agent_id="b1", kinds=["reflection.bypassed"])
        assert [(e.payload["branch"], e.payload["commits"]) for e in stored] == [(wt.branch, bypass)]
        assert bypass[0] in await _git(memory, "rev-list", "HEAD")
    kinds = [e.kind for e in seen.events]
    assert kinds.index("reflection.bypassed") < kinds.index("reflection.outcome")


def _note(name: str, body: str) -> str:
    return f"---\nname: {name}\ndescription: a note\n---\n{body}\n"

"""V1: under ``[reflection] merge = review`` every reflection branch waits for a person, and a
person's merge or discard is recorded (real git, the scripted model, the real store)."""

from __future__ import annotations

from pathlib import Path

import anyio
import pytest

from orchestrator.app.review import discard_reflection, merge_reflection, show_reflection
from orchestrator.app.session import ChatSession
from orchestrator.base.errors import UsageError
from orchestrator.base.events import Event
from orchestrator.memfs.worktrees import create_worktree, list_reflections, remove_worktree
from orchestrator.store import ReflectionRecord, utc_now
from subagents.reflection import recover_reflections
from tests.memfs.reflection_helpers import commit_file

pytestmark = pytest.mark.anyio

REVIEW = {"reflection_trigger": "step-count", "reflection_step_count": 1, "reflection_merge": "review"}


class Seen:
    def __init__(self) -> None:
        self.events: list[Event] = []

    async def __call__(self, event: Event) -> None:
        self.events.append(event)

    def kinds(self) -> list[str]:
        return [e.kind for e in self.events]


async def _head(repo: Path) -> str:
    result = await anyio.run_process(["git", "-C", str(repo), "rev-parse", "HEAD"])
    return result.stdout.decode().strip()


async def test_every_reflection_branch_is_held_until_a_person_decides(tmp_path: Path) -> None:
    seen = Seen()
    async with ChatSession.open(agent_id="v1", workspace=tmp_path, cli=REVIEW, observer=seen) as s:
        memory = s.agent.memory_dir
        heads = []
        for n in range(4):
            heads.append(await _head(memory))
            await s.send(f"I like the lucky number {n}")
            assert await s.supervisor.drain(60)
        store = s.runtime.store
        records = await store.reflections("v1")
        launched = [e for e in seen.events if e.kind == "reflection.launch"]
        assert len(launched) == 4
        # nothing merged on its own: every launch is held, every branch is still there
        assert "reflection.merged" not in seen.kinds()
        assert [r.status for r in records] == ["kept_review"] * 4
        branches = {b.branch for b in await list_reflections(memory)}
        assert branches == {r.branch for r in records}
        assert all(not b.merged for b in await list_reflections(memory))
        outcomes = [e for e in seen.events if e.kind == "reflection.outcome"]
        assert [getattr(o, "outcome", None) for o in outcomes] == ["review"] * 4
        review = [e for e in seen.events if e.kind == "reflection.review"]
        assert all(getattr(e, "added", 0) > 0 for e in review)
        # turn ends retry nothing held
        await s.reflection.retry_waiting()
        assert [r.status for r in await store.reflections("v1")] == ["kept_review"] * 4

        first, second = records[0], records[1]
        shown = await show_reflection(store, "v1", memory, first.id)
        assert shown.held is not None and shown.held.files
        assert "lucky number 0" in shown.patch
        assert "I like the lucky number 0" in shown.transcript
        assert "lucky number 1" not in shown.transcript

        before = await _head(memory)
        decision = await merge_reflection(store, "v1", memory, first.id, by="ada", why="right")
        assert decision.outcome in {"merged", "resolved"}
        assert await _head(memory) != before
        assert "lucky number 0" in (memory / "human.md").read_text(encoding="utf-8")
        with pytest.raises(UsageError):
            await discard_reflection(store, "v1", memory, second.id, by="ada", why="  ")
        dropped = await discard_reflection(store, "v1", memory, second.id, by="ada", why="wrong number")
        assert dropped.commits >= 1
        saved = {r.id: r for r in await store.reflections("v1")}
        assert (saved[first.id].decision, saved[first.id].decided_by, saved[first.id].decided_why) == ("merge", "ada", "right")
        assert saved[first.id].status in {"merged", "resolved"}
        assert (saved[second.id].status, saved[second.id].decided_by, saved[second.id].decided_why) == (
            "discarded", "ada", "wrong number",
        )
        assert second.branch not in {b.branch for b in await list_reflections(memory)}
        logged = await store.events(agent_id="v1", kinds=["reflection.decided"])
        assert [(e.payload["reflection_id"], e.payload["decision"], e.payload["by"], e.payload["why"]) for e in logged] == [
            (first.id, "merge", "ada", "right"), (second.id, "discard", "ada", "wrong number"),
        ]
        commits = await store.events(agent_id="v1", kinds=["memory.commit"])
        reviewed = [e.payload for e in commits if e.payload["source"] == "review" and e.payload["by"] == first.id]
        assert reviewed and reviewed[0]["provenance"]["reflection"] == first.id, "the merged commit's own trailers"
        assert reviewed[0]["provenance"]["source"] in {"reflection", "resolver"}


async def test_a_run_that_died_under_review_is_held_at_start_up_not_merged(tmp_path: Path) -> None:
    """R6 meets V1: a reflection launched under ``review`` whose process died leaves its branch; start-up
    recovery holds it for a person (its one outcome ``review``) instead of merging it."""
    async with ChatSession.open(agent_id="v2", workspace=tmp_path, cli=REVIEW) as s:
        memory = s.agent.memory_dir
        wt = await create_worktree(memory, agent_id="v2")
        await anyio.to_thread.run_sync(commit_file, wt.path, "notes/r.md", "---\nname: r\ndescription: a note\n---\nx\n", "r")
        await remove_worktree(memory, wt)
        dead = (await anyio.run_process(["sh", "-c", "echo $$"])).stdout.decode().strip()
        record = ReflectionRecord(
            id=wt.id, agent_id="v2", conversation_id=s.conversation_id, branch=wt.branch, trigger="manual",
            status="running", reason=None, base_revision=wt.base_revision, through_seq=0, commits=(), files=(),
            created_at=utc_now(), updated_at=utc_now(), owner_pid=int(dead), review=True,
        )  # fmt: skip
        await s.runtime.store.save_reflection(record)
        head = await _head(memory)
        await recover_reflections(s.runtime.store, "v2", memory)
        (saved,) = await s.runtime.store.reflections("v2")
        assert saved.status == "kept_review"
        assert await _head(memory) == head
        assert [b.branch for b in await list_reflections(memory)] == [wt.branch]
        outcomes = await s.runtime.store.events(agent_id="v2", kinds=["reflection.outcome"])
        assert [e.payload["outcome"] for e in outcomes] == ["review"]


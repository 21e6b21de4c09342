"""Byte-exact reminder texts (TURN-3.1, TURN-3.4, TURN-4.4, TURN-7.2/TURN-7.5) and their delivery order (TURN-7.5 item 2)."""

from __future__ import annotations

from datetime import UTC, datetime
from functools import partial
from pathlib import Path

import anyio
import pytest

from orchestrator.agent.reminders import (
    INVALID_LINE_CHARS,
    INVALID_SHOWN,
    agent_info_reminder,
    join_reminders,
    memory_invalid_reminder,
    memory_update_reminder,
    sync_reminder,
)
from orchestrator.app.session import ChatSession
from orchestrator.models.scripted import ScriptedModel
from tests.memfs.reflection_helpers import git

REV = "0123456789abcdef0123456789abcdef01234567"


def test_persisted_memory_update_byte_exact() -> None:
    assert memory_update_reminder(REV, "\n  <memory>x</memory>\n\n \t") == (
        "<system-reminder>\n"
        "<memory_update>\n"
        f"The local memory filesystem has been edited and committed at revision {REV}.\n"
        "This updates part of your persona/system memory. Treat the following freshly rendered memory context "
        "as authoritative from now on; where it conflicts with earlier memory context, this newer memory "
        "context wins.\n"
        "\n"
        "\n  <memory>x</memory>\n"
        "</memory_update>\n"
        "</system-reminder>"
    )


def test_memory_update_trims_the_javascript_whitespace_set() -> None:
    assert memory_update_reminder(REV, "m\ufeff\u3000\n").endswith("\n\nm\n</memory_update>\n</system-reminder>")
    assert memory_update_reminder(REV, "m\x1f").endswith("\n\nm\x1f\n</memory_update>\n</system-reminder>")


def test_agent_info_byte_exact_with_iso_utc_last_run() -> None:
    text = agent_info_reminder(
        agent_id="agent-1",
        agent_name=None,
        agent_description=None,
        conversation_id="conv-1",
        memory_dir="/home/u/agents/agent-1/memory",
        last_run=datetime(2026, 10, 9, 15, 42, 10, 500000, tzinfo=UTC),
        now=datetime(2026, 10, 11, 16, 0, 0, tzinfo=UTC),
    )
    assert text == (
        "<system-reminder> This is an automated message providing information about you.\n"
        "- **Agent ID (also stored in `AGENT_ID` env var)**: agent-1\n"
        "- **Conversation ID (also stored in `CONVERSATION_ID` env var)**: conv-1\n"
        "- **Memory directory (also stored in `MEMORY_DIR` env var)**: `/home/u/agents/agent-1/memory`\n"
        "- **Agent name**: (unnamed) (the user can change this with /rename)\n"
        "- **Agent description**: (no description) (the user can change this with /description)\n"
        "- **Last message**: 2026-10-09T15:42:10Z (2 days ago)\n"
        "</system-reminder>"
    )


@pytest.mark.parametrize(
    ("seconds", "relative"),
    [(0, "just now"), (59, "just now"), (60, "1 minute ago"), (7200, "2 hours ago"), (86400, "1 day ago")],
)
def test_agent_info_relative_time(seconds: int, relative: str) -> None:
    last = datetime(2026, 1, 1, tzinfo=UTC)
    now = datetime.fromtimestamp(last.timestamp() + seconds, UTC)
    text = agent_info_reminder(
        agent_id="a", agent_name="n", agent_description="d", conversation_id=None, memory_dir=None, last_run=last, now=now
    )
    assert f"- **Last message**: 2026-01-01T00:00:00Z ({relative})\n" in text
    assert "Conversation ID" not in text and "Memory directory" not in text


def test_sync_texts_byte_exact() -> None:
    assert sync_reminder("conflict", memory_dir="/m", summary="merge in progress", local_only=True) == (
        "<system-reminder>\n"
        "MEMORY GIT CONFLICT: The memory repository needs manual conflict resolution.\n"
        "\n"
        "Memory directory: /m\n"
        "Status: merge in progress\n"
        "\n"
        "Resolve the merge/rebase conflicts in the memory repository, stage the resolved files, and complete the "
        "merge/rebase or create the needed commit. The harness will retry remote push after a future turn when the "
        "repo is clean.\n"
        "</system-reminder>"
    )
    assert sync_reminder("push_failed", memory_dir="/m", summary="boom", local_only=False) == (
        "<system-reminder>\n"
        "MEMORY SYNC FAILED: The harness could not push pending memory commits.\n"
        "\n"
        "Memory directory: /m\n"
        "Status: boom\n"
        "\n"
        "Inspect the memory repository and resolve any local git issue. The harness will retry remote push after "
        "a future turn when the repo is clean.\n"
        "</system-reminder>"
    )
    remote_dirty = sync_reminder("dirty", memory_dir="/m", summary="1 uncommitted memory change(s).", local_only=False)
    assert remote_dirty is not None and "\n\nCommit these memory changes when appropriate, staging" in remote_dirty
    assert all(sync_reminder(s, memory_dir="/m", summary="", local_only=True) is None for s in ("clean", "pushed", "skipped"))


@pytest.mark.anyio
async def test_reminders_arrive_as_one_message_in_catalog_order_before_the_user_message(tmp_path: Path) -> None:
    async with ChatSession.open(agent_id="a1", model=ScriptedModel(), workspace=tmp_path) as session:
        store, conv, repo = session.runtime.store, session.conversation_id, session.agent.memory_dir
        await anyio.to_thread.run_sync(partial((repo / "persona.md").write_text, "uncommitted\n"))
        await session.send("one")  # delivers agent-info; the sync queues MEMORY COMMIT NEEDED
        await store.enqueue_reminder(conv, "reflection-kept:r1", "<system-reminder>\nKEPT\n</system-reminder>", priority=60)
        await store.rearm(conv, "agent-info")  # as compaction does
        pending = {p.key: p.text for p in await store.pending_reminders(conv)}
        await session.send("two")
        history = await store.in_context(conv)
    user = max(i for i, m in enumerate(history) if m.message.role == "user" and m.message.content == "two")
    reminder = history[user - 1]
    assert reminder.message.role == "user" and reminder.message.kind == "reminder"
    assert reminder.metadata["reminder_keys"] == ["agent-info", "memory-git-sync", "reflection-kept:r1"]
    info = reminder.message.content.split("\n\n<system-reminder>\nMEMORY COMMIT NEEDED")[0]
    assert info.startswith("<system-reminder> This is an automated message providing information about you.\n")
    assert reminder.message.content == join_reminders([info, pending["memory-git-sync"], pending["reflection-kept:r1"]])


def test_the_invalid_memory_reminder_is_bounded_with_a_count_and_the_command_that_shows_all() -> None:
    errors = [f"f{i}.md: missing frontmatter (must start with ---)" for i in range(50_000)]
    text = memory_invalid_reminder("abc1234", errors)
    assert len(text) < 3_000
    lines = text.splitlines()
    assert lines[2 : 2 + INVALID_SHOWN] == ["  " + e for e in errors[:INVALID_SHOWN]]
    assert "49980 more (50000 problems in all)" in text and 'reverie memory validate --head "$MEMORY_DIR"' in text
    long = memory_invalid_reminder("abc1234", ["x" * 10_000])
    assert max(len(line) for line in long.splitlines()) == INVALID_LINE_CHARS + 2
    few = memory_invalid_reminder("abc1234", errors[:INVALID_SHOWN])
    assert "more" not in few and few.count("\n  f") == INVALID_SHOWN


@pytest.mark.anyio
async def test_a_turn_on_a_heavily_invalid_head_sends_a_bounded_reminder(tmp_path: Path) -> None:
    """A8: 2,000 invalid files committed past the hook cost one short reminder, not one
    line each on every turn."""
    model = ScriptedModel()
    async with ChatSession.open(agent_id="a1", model=model, workspace=tmp_path) as session:
        repo = session.agent.memory_dir

        def plant() -> None:
            for i in range(2_000):
                (repo / f"bad{i:04d}.md").write_text("no frontmatter\n")
            git(repo, "add", "-A")
            git(repo, "commit", "-q", "--no-verify", "-m", "bypass")

        await anyio.to_thread.run_sync(plant)
        await session.send("one")
        await session.send("two")
    sent = [m.content for request in model.requests[-2:] for m in request.messages if "MEMORY INVALID" in m.content]
    assert sent and all(len(text) < 5_000 for text in sent)
    assert all("... 1980 more (2000 problems in all)" in text for text in sent)

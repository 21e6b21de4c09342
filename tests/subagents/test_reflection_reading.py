"""Reflection in bounded pieces (D5): the transcript is read from ``$TRANSCRIPT_PATH`` in
slices, and no request of the reflection agent exceeds the context window, whatever its length."""

from __future__ import annotations

import subprocess
from pathlib import Path

import anyio
import pytest

from orchestrator.app.session import ChatSession
from orchestrator.compaction import estimate_messages
from orchestrator.models.types import Message, ToolCall
from subagents.reflection_reader import ReadingPlan, fit_context, plan_reading

_FILLER = "we went over the quarterly numbers, the migration plan and the onboarding checklist again. "


def _committed(memory: Path, name: str) -> str:
    out = subprocess.run(["git", "-C", str(memory), "show", f"HEAD:{name}"], capture_output=True, text=True)
    return out.stdout if out.returncode == 0 else ""


@pytest.mark.anyio
@pytest.mark.slow
async def test_a_transcript_ten_times_the_window_reflects_in_slices() -> None:
    window = 8000
    async with ChatSession.open(
        agent_id="reader", cli={"context_window": window, "reflection_trigger": "off"}
    ) as chat:
        store, conv = chat.runtime.store, chat.conversation_id
        messages: list[Message] = [Message("user", "I use emacs every day")]
        for i in range(200):
            messages.append(Message("user", f"note {i}: " + _FILLER * 10))
            messages.append(Message("assistant", f"reply {i}: " + _FILLER * 10))
        messages.append(Message("user", "call me Admiral"))
        messages.append(Message("assistant", "(mock) I heard: call me Admiral"))
        await store.append_messages(conv, messages)
        assert estimate_messages(messages) > 10 * window
        await chat.reflect_now()
        assert await chat.finish_one_shot()
        calls = [c for c in await store.events(kinds=["model.call"]) if c.payload["purpose"] == "reflect"]
        assert len(calls) > 10, "the transcript was read in many slices"
        assert max(int(c.payload["prompt_tokens"]) for c in calls) <= window
        human = await anyio.to_thread.run_sync(_committed, chat.agent.memory_dir, "human.md")
        assert "I use emacs every day" in human and "call me Admiral" in human
        records = await store.reflections(chat.agent.agent_id)
        assert [r.status for r in records] == ["merged"]


def _plan(lines: int, width: int, tmp_path: Path, window: int) -> tuple[ReadingPlan, str]:
    text = "".join(f"[user] line {i} " + "x" * width + "\n" for i in range(lines))
    path = tmp_path / "payload.txt"
    path.write_text(text)
    return plan_reading(path, text, window=window, fixed_tokens=1500), text


def test_the_plan_reads_every_line_in_slices_that_fit(tmp_path: Path) -> None:
    plan, text = _plan(3000, 120, tmp_path, 8000)
    assert plan.slices > 1 and plan.slices * plan.slice_lines >= plan.total_lines == 3000
    assert plan.max_steps >= 2 * plan.slices
    assert plan.offsets()[0] == 1 and plan.offsets()[-1] <= 3000
    slice_chars = (plan.slice_lines) * (len("[user] line 0000 ") + 120 + 8)
    assert slice_chars / 4 < 8000 - 1500


def test_fit_context_trims_older_steps_and_carries_their_notes(tmp_path: Path) -> None:
    plan, _ = _plan(400, 200, tmp_path, 3000)
    messages = [Message("user", "instructions")]
    for i in range(30):
        call = f"c{i}"
        messages.append(
            Message("assistant", f"Notes from lines {i}-{i}:\n- fact {i}", tool_calls=(ToolCall(call, "read_file", "{}"),))
        )
        messages.append(Message("tool", "r" * 4000, tool_call_id=call))
    fitted = fit_context(messages, 1500, plan, read_through=300)
    assert estimate_messages(fitted) <= 1500
    assert fitted[-1] == messages[-1] and fitted[-2] == messages[-2], "the newest step stays whole"
    assert "furthest transcript line read so far is 300" in fitted[0].content
    ids = {m.tool_call_id for m in fitted if m.role == "tool"}
    calls = {c.id for m in fitted for c in m.tool_calls}
    assert ids == calls, "a tool call never loses its result"

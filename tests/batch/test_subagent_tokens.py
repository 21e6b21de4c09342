"""Every model call is counted (O6): summaries and reflections appear as ``model.call`` events
in a batch task's event log, and the task's totals include them while showing them apart."""

from __future__ import annotations

from pathlib import Path

import anyio
import pytest

from orchestrator.batch.eventlog import EventRecord, read_events
from orchestrator.batch.results import summarize
from orchestrator.batch.runner import RunOptions, run_task
from orchestrator.batch.suite import parse_task

_NOTE = "Notes on the garden: the roses need pruning, the beds need compost and the hose leaks. " * 3


@pytest.mark.anyio
async def test_subagent_calls_are_in_the_event_log_and_the_totals(tmp_path: Path) -> None:
    task = parse_task(
        {
            "id": "counted",
            "turns": ["I use emacs every day", *[_NOTE] * 6, "anything else"],
            "settings": {"context_window": 2600, "reflection_trigger": "compaction-event"},
            "checks": [{"where": "answer", "contains": "anything else"}],
        }
    )
    out = tmp_path / "run"
    result = await run_task(task, RunOptions(out_dir=out, price_in=1.0, price_out=2.0))
    assert result.status == "passed", result.error
    calls = await _calls(out)
    by_purpose: dict[str, list[int]] = {}
    for call in calls:
        assert call.agent_id == "counted" and call.conversation_id
        by_purpose.setdefault(str(call.payload["purpose"]), []).append(int(call.payload["prompt_tokens"]))
    assert {"chat", "summarize", "reflect"} <= set(by_purpose)
    subagent_in = sum(sum(v) for k, v in by_purpose.items() if k != "chat")
    assert result.subagent_tokens_in == subagent_in > 0
    assert result.tokens_in == sum(sum(v) for v in by_purpose.values()) > subagent_in
    assert result.cost is not None and result.subagent_cost is not None
    assert 0 < result.subagent_cost < result.cost
    summary = summarize([result])
    assert summary["subagent_tokens_in"] == subagent_in and summary["subagent_cost"] == result.subagent_cost


async def _calls(out: Path) -> list[EventRecord]:
    return await anyio.to_thread.run_sync(lambda: read_events(out, kinds=["model.call"]))

"""The optional LLM judge: a real HTTP round trip to the loopback server; the rubric, the judge's
model and its verdict are stored with the result, and its verdict decides the grade."""

from __future__ import annotations

import json
from pathlib import Path

import anyio
import pytest

from orchestrator.batch.executors import LocalExecutor
from orchestrator.batch.judge import JUDGE_RUBRIC, parse_verdict
from orchestrator.batch.run import run_suite
from orchestrator.batch.runner import RunOptions
from orchestrator.batch.suite import parse_suite
from orchestrator.testing.openai_server import LoopbackOpenAI, text_reply

pytestmark = pytest.mark.anyio

TASK = {"id": "q", "turns": ["hello there"], "grade": {"answer": "Target", "ability": "extraction"}}


def test_parse_verdict() -> None:
    assert parse_verdict("Yes.") is True and parse_verdict("**no**") is False and parse_verdict("maybe") is None


async def test_the_judge_decides_the_grade_and_its_record_is_kept(tmp_path: Path) -> None:
    tasks = parse_suite(json.dumps(TASK) + "\n" + json.dumps({**TASK, "id": "r"}))
    with LoopbackOpenAI(model="judge-1") as server:
        server.enqueue(text_reply("Yes"), text_reply("it depends"))
        options = RunOptions(out_dir=tmp_path / "run", judge_model="judge-1", judge_base_url=server.base_url)
        report = await run_suite(tasks[:1], options, LocalExecutor(1))
        again = await run_suite(tasks[1:], RunOptions(out_dir=tmp_path / "run2", judge_model="judge-1",
                                                      judge_base_url=server.base_url), LocalExecutor(1))
        bodies = await anyio.to_thread.run_sync(lambda: server.chat_bodies)
    (passed,) = report.results
    # the deterministic grader would fail this reply ("(mock) I heard: hello there"); the judge said yes
    assert passed.final_answer.startswith("(mock) I heard") and passed.status == "passed" and passed.quality == 1.0
    judged = passed.grade["judge"]  # type: ignore[index]
    assert judged["model"] == "judge-1" and judged["rubric"] == JUDGE_RUBRIC and judged["verdict"] == "Yes"
    assert passed.grade["method"] == "judge"  # type: ignore[index]
    (unclear,) = again.results
    assert unclear.status == "failed" and unclear.grade["judge"]["error"] == "the judge answered neither yes nor no"  # type: ignore[index]
    first = bodies[0]
    assert first["model"] == "judge-1" and first["messages"][0]["content"] == JUDGE_RUBRIC
    assert "Correct answer: Target" in first["messages"][1]["content"]
    assert "(mock) I heard: hello there" in first["messages"][1]["content"]

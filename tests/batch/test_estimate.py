"""``--estimate``: the plan run on the embedded model at no cost, its calls and tokens written for
the real run that follows, which reports them beside what it spent (over loopback HTTP)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from orchestrator import sweep
from orchestrator.models.scripted import ScriptedModel
from orchestrator.models.types import Message, ModelRequest, ToolCall, ToolSpec
from orchestrator.testing.openai_server import LoopbackOpenAI, Planned, text_reply, tool_call_reply

ROOT = Path(__file__).resolve().parents[2]
SUITE = ROOT / "examples" / "longmemeval-s" / "suite.jsonl"
SUMMARIZER = "You are writing the memory of an ongoing conversation"


def _as_embedded(body: Any) -> Planned:
    """A served model that answers as the embedded one would, so the test measures the estimate's
    accounting (what the server is sent), not a difference between two models' behaviour."""
    raw = list(body["messages"])
    system = raw.pop(0)["content"] if raw and raw[0]["role"] == "system" else ""
    messages = tuple(
        Message(
            role=m["role"], content=m.get("content") or "", tool_call_id=m.get("tool_call_id"),
            tool_calls=tuple(
                ToolCall(c["id"], c["function"]["name"], c["function"]["arguments"]) for c in m.get("tool_calls") or ()
            ),
        )
        for m in raw
    )
    tools = tuple(
        ToolSpec(t["function"]["name"], t["function"].get("description", ""), t["function"].get("parameters", {}))
        for t in body.get("tools") or ()
    )
    purpose = "summarize" if not tools and SUMMARIZER in system else "chat"
    reply = ScriptedModel()._respond(ModelRequest(system, messages, tools, model=body["model"], purpose=purpose))
    if reply.message.tool_calls:
        call = reply.message.tool_calls[0]
        return tool_call_reply(call.name, call.arguments, text=reply.message.content, id=call.id)
    return text_reply(reply.message.content)


@pytest.mark.anyio
@pytest.mark.parametrize("anyio_backend", ["trio"])  # the backends' own paths are covered by the batch tests
async def test_an_estimate_costs_nothing_and_the_real_run_lands_near_it(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    out = tmp_path / "sweep"
    with LoopbackOpenAI(fallback=_as_embedded) as server:
        monkeypatch.setenv("REVERIE_BASE_URL", server.base_url)
        monkeypatch.setenv("REVERIE_MODEL", "served-model")
        await sweep(SUITE, ["off", "step-count:2"], out, limit=4, estimate=True, price_in=3.0, price_out=15.0)
        assert server.chat_bodies == [], "an estimate sends nothing to the configured endpoint"
        figures = json.loads((out / "estimate.json").read_text())
        off = figures["settings"]["off"]
        assert off["calls"] > off["subagent_calls"] > 0 and off["prompt_tokens"] > 0
        assert figures["settings"]["step-count-2"]["subagent_calls"] > off["subagent_calls"]  # reflections cost calls
        assert off["cost"] == pytest.approx(off["prompt_tokens"] * 3e-6 + off["completion_tokens"] * 15e-6)
        assert figures["total"]["calls"] == sum(r["calls"] for r in figures["settings"].values())
        assert sorted(p.name for p in out.iterdir()) == ["estimate", "estimate.json"]

        real = await sweep(SUITE, ["off"], out, limit=4)
    spent = sum(r["main_tokens_in"] + r["subagent_tokens_in"] for r in real.summary["settings"])
    assert server.chat_bodies, "the real run went to the served model"
    assert real.summary["estimate"]["settings"]["off"] == off
    assert abs(spent - off["prompt_tokens"]) <= 0.10 * off["prompt_tokens"], (spent, off["prompt_tokens"])


def test_the_command_prints_calls_tokens_and_dollars_per_setting(tmp_path: Path) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "orchestrator", "sweep", str(SUITE), "-t", "off", "-t", "step-count:2", "--limit", "2",
         "--estimate", "--price-in", "3", "--price-out", "15", "--out", str(tmp_path / "s"), "--quiet"],
        capture_output=True, text=True, cwd=ROOT, timeout=300, env={**os.environ, "COLUMNS": "120"},
    )
    assert done.returncode == 0, done.stderr
    table = done.stdout
    assert "model calls" in table and "prompt tokens" in table and "total" in table and "$" in table
    assert "off" in table and "step-count-2" in table and "sweep of" not in table

"""reverie against a real OpenAI-compatible server (llama.cpp + SmolLM2-135M, chatml-function-calling).

The scripted loopback server proves reverie handles the wire format as *we* wrote it; these tests
prove it handles what a real server sends. They assert structure only (roles, ids, tool-call shapes,
that streamed chunks add up), never the words of a 135M model, so they fail exactly when the
server's answers break reverie's parsing.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from orchestrator.models.openai_client import OpenAIModel
from orchestrator.models.types import Message, ModelRequest, ModelResponse, ToolSpec
from orchestrator.testing.llama_server import LlamaServer

pytestmark = pytest.mark.real_model

_SYSTEM = "You are a helpful assistant. Answer briefly."
_WEATHER = ToolSpec(
    name="get_weather",
    description="Get the current weather for a city.",
    parameters={
        "type": "object",
        "properties": {"city": {"type": "string", "description": "The city name"}},
        "required": ["city"],
    },
)
_FINISHES = {"stop", "length", "tool_calls"}


def _model(server: LlamaServer) -> OpenAIModel:
    return OpenAIModel(base_url=server.base_url, api_key="sk-local", model=server.model_id, max_attempts=1)


def _assert_text_reply(response: ModelResponse) -> None:
    assert response.message.role == "assistant"
    assert response.message.tool_calls == ()
    assert response.message.content.strip(), "the server's text did not reach the response"
    assert response.finish_reason in {"stop", "length"}
    assert response.model


@pytest.mark.anyio
async def test_plain_completion(llama: LlamaServer) -> None:
    model = _model(llama)
    try:
        response = await model.complete(
            ModelRequest(
                system=_SYSTEM,
                messages=(Message(role="user", content="Say hello to Ada in one short sentence."),),
                max_tokens=32,
            )
        )
    finally:
        await model.aclose()
    _assert_text_reply(response)


@pytest.mark.anyio
async def test_streamed_chunks_join_to_the_final_text(llama: LlamaServer) -> None:
    chunks: list[str] = []

    async def on_text(text: str) -> None:
        chunks.append(text)

    model = _model(llama)
    try:
        response = await model.complete(
            ModelRequest(
                system=_SYSTEM,
                messages=(Message(role="user", content="Count from one to ten, in words."),),
                max_tokens=48,
            ),
            on_text=on_text,
        )
    finally:
        await model.aclose()
    _assert_text_reply(response)
    assert len(chunks) >= 2, f"expected a streamed reply in several chunks, got {chunks!r}"
    assert all(chunks), "an empty chunk reached on_text"
    assert "".join(chunks) == response.message.content


@pytest.mark.anyio
async def test_forced_tool_call_then_tool_result_turn(llama: LlamaServer) -> None:
    model = _model(llama)
    question = Message(role="user", content="What is the weather in Paris right now?")
    try:
        first = await model.complete(
            ModelRequest(
                system=_SYSTEM,
                messages=(question,),
                tools=(_WEATHER,),
                tool_choice=_WEATHER.name,
                max_tokens=64,
            )
        )
        assert first.finish_reason == "tool_calls"
        assert first.message.role == "assistant"
        assert len(first.message.tool_calls) >= 1
        ids = [call.id for call in first.message.tool_calls]
        assert all(ids) and len(set(ids)) == len(ids), f"tool call ids must be non-empty and distinct: {ids}"
        for call in first.message.tool_calls:
            assert call.name == _WEATHER.name
            arguments = json.loads(call.arguments)
            assert isinstance(arguments, dict), f"arguments must be a JSON object: {call.arguments!r}"
        call = first.message.tool_calls[0]
        results = tuple(
            Message(
                role="tool", content=json.dumps({"city": "Paris", "temperature_c": 21}), tool_call_id=c.id
            )
            for c in first.message.tool_calls
        )
        second = await model.complete(
            ModelRequest(
                system=_SYSTEM,
                messages=(question, first.message, *results),
                tools=(_WEATHER,),
                tool_choice="none",
                max_tokens=48,
            )
        )
    finally:
        await model.aclose()
    assert call.id
    assert second.message.role == "assistant"
    assert second.finish_reason in _FINISHES
    assert second.message.content.strip() or second.message.tool_calls
    for extra in second.message.tool_calls:
        assert extra.name == _WEATHER.name
        assert isinstance(json.loads(extra.arguments), dict)


def _reverie_command() -> list[str]:
    script = Path(sys.executable).with_name("reverie")
    assert script.exists(), f"the reverie console script is not installed next to {sys.executable}"
    return [str(script)]


def _run(args: list[str], env: dict[str, str], cwd: Path) -> subprocess.CompletedProcess[str]:
    done = subprocess.run(
        [*_reverie_command(), *args],
        env=env,
        cwd=cwd,
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert done.returncode == 0, f"reverie {args[0]} failed ({done.returncode}):\n{done.stderr[-2000:]}"
    assert "Traceback" not in done.stderr
    return done


@pytest.mark.allow_blocking
def test_reverie_chat_against_the_server(llama: LlamaServer, tmp_path: Path) -> None:
    home = tmp_path / "chat-home"
    home.mkdir()
    env = {k: v for k, v in os.environ.items() if not k.startswith(("REVERIE_", "OPENAI_"))}
    env.update(
        REVERIE_HOME=str(home),
        REVERIE_WORKTREES=str(home / "worktrees"),
        REVERIE_BASE_URL=llama.base_url,
        REVERIE_MODEL=llama.model_id,
        OPENAI_API_KEY="sk-local",
        REVERIE_MAX_STEPS="4",
    )
    prompt = "Reply with a one-sentence greeting."
    _run(["chat", "-p", prompt], env, tmp_path)
    messages: list[dict[str, Any]] = json.loads(_run(["history", "--json"], env, tmp_path).stdout)

    assert isinstance(messages, list) and messages
    users = [i for i, m in enumerate(messages) if m["role"] == "user" and m["kind"] == "message"]
    asked = [i for i in users if prompt in messages[i]["content"]]
    assert asked, "the prompt was not stored as a user message"
    after = [m for m in messages[asked[-1] + 1 :] if m["kind"] != "reminder"]
    assert after and after[-1]["role"] == "assistant", [(m["role"], m["kind"]) for m in messages]
    assert after[-1]["content"].strip() or after[-1]["tool_calls"], "the final assistant message is empty"
    assert {m["role"] for m in after} <= {"assistant", "tool"}, [(m["role"], m["kind"]) for m in after]

    issued: set[str] = set()
    for message in after:
        if message["role"] != "assistant":
            assert message["tool_calls"] == []
        for call in message["tool_calls"]:
            assert call["id"] and call["name"], f"stored tool call lacks id or name: {call!r}"
            assert isinstance(json.loads(call["arguments"] or "{}"), dict), (
                f"arguments not an object: {call!r}"
            )
            issued.add(call["id"])
        if message["role"] == "tool":
            assert message["tool_call_id"] in issued, "a tool result answers no earlier tool call"


@pytest.mark.allow_blocking
def test_memory_benchmark_smoke_run_on_the_tiny_model(llama: LlamaServer, tmp_path: Path) -> None:
    """The shipped LongMemEval-S suite end to end on the 135M model: two questions, their history
    replayed (its summaries and reflections by the model), the question answered and graded. The
    score is printed, never asserted: a 135M model's words are not what this tier checks."""
    home = tmp_path / "bench-home"
    home.mkdir()
    env = {k: v for k, v in os.environ.items() if not k.startswith(("REVERIE_", "OPENAI_"))}
    env.update(REVERIE_HOME=str(home), REVERIE_BASE_URL=llama.base_url, REVERIE_MODEL=llama.model_id,
               OPENAI_API_KEY="sk-local", REVERIE_MAX_STEPS="4",
               # a reflection's prompt (~1,360 tokens) and a short answer: the 135M model otherwise writes
               # until the window is full, which was most of the tier's time (docs/testing.md)
               REVERIE_LIMIT_REFLECTION_TOKENS="1600")
    suite = Path(__file__).resolve().parents[2] / "examples" / "longmemeval-s" / "suite.jsonl"
    out = tmp_path / "bench"
    done = subprocess.run(
        [*_reverie_command(), "run", str(suite), "--task", "lme-58bf7951", "--task", "lme-e47becba",
         "--context-window", "2048", "--out", str(out), "-q"],  # two of the shortest histories (11 and 13 exchanges)
        env=env, cwd=tmp_path, stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=1800, check=False,
    )
    assert done.returncode in (0, 1), f"reverie run failed ({done.returncode}):\n{done.stderr[-2000:]}"
    assert "Traceback" not in done.stderr
    results = [json.loads(line) for line in (out / "results.jsonl").read_text().splitlines()]
    assert len(results) == 2 and all("quality" in r and "grade" in r for r in results)
    summary = json.loads((out / "summary.json").read_text())
    print(f"\nLongMemEval-S smoke on {llama.model_id}: quality {summary['quality']} over {len(results)} questions; "
          + "; ".join(f"{r['id']} {r['status']} {r['final_answer'][:60]!r}" for r in results))

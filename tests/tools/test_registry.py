"""run_tool's contract: every model mistake is a one-line error result, never an exception."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from orchestrator.models.types import Message
from orchestrator.store import Store
from orchestrator.tools import TOOL_NAMES, ToolContext, parse_arguments, run_tool, tool_specs

pytestmark = pytest.mark.anyio


def _ctx(tmp_path: Path, store: Store | None = None) -> ToolContext:
    ws = tmp_path / "ws"
    ws.mkdir(exist_ok=True)
    return ToolContext(workspace=ws, agent_id="a1", conversation_id="c", store=store)


def test_specs_are_json_schemas() -> None:
    specs = tool_specs()
    assert [s.name for s in specs] == list(TOOL_NAMES)
    assert set(TOOL_NAMES) == {"bash", "read_file", "write_file", "edit_file", "conversation_search"}
    for spec in specs:
        assert spec.parameters["type"] == "object" and spec.parameters["required"]
        json.dumps(spec.parameters)
    with pytest.raises(ValueError, match="unknown tool 'nope'"):
        tool_specs(["nope"])


@pytest.mark.parametrize(
    ("name", "raw", "expected"),
    [
        ("nope", "{}", "Error: unknown tool 'nope'; available tools: bash, "),
        ("bash", "{not json", "Error: bash: arguments are not valid JSON (Expecting property name"),
        ("bash", "[1]", "Error: bash: arguments must be a JSON object, not list"),
        ("bash", "{}", 'Error: bash: missing required argument "command"'),
        ("bash", '{"command": 5}', 'Error: bash: argument "command" must be string, not int'),
        (
            "read_file",
            '{"path": "x", "offset": "1"}',
            'Error: read_file: argument "offset" must be integer, not str',
        ),
        (
            "read_file",
            '{"path": "x", "limit": true}',
            'Error: read_file: argument "limit" must be integer, not bool',
        ),
        (
            "read_file",
            '{"path": "x", "colour": 1}',
            'Error: read_file: unknown argument "colour" (expected: path',
        ),
        ("edit_file", "", 'Error: edit_file: missing required argument "path"'),
    ],
)
async def test_bad_calls_are_error_results(tmp_path: Path, name: str, raw: str, expected: str) -> None:
    result = await run_tool(name, raw, _ctx(tmp_path))
    assert not result.ok
    assert result.output.startswith(expected)
    assert "\n" not in result.output


def test_whole_floats_count_as_integers() -> None:
    spec = tool_specs(["read_file"])[0]
    assert parse_arguments(spec, '{"path": "x", "limit": 5.0, "offset": null}') == {"path": "x", "limit": 5}


async def test_conversation_search_tool(tmp_path: Path) -> None:
    async with Store.opened(tmp_path / "s.sqlite3") as store:
        await store.ensure_agent("a1")
        await store.ensure_agent("a2")
        mine = await store.create_conversation("a1")
        theirs = await store.create_conversation("a2")
        hit = await store.append_message(mine.id, Message(role="user", content="the kerberos ticket expired"))
        await store.append_message(theirs.id, Message(role="user", content="kerberos elsewhere"))
        ctx = _ctx(tmp_path, store)
        result = await run_tool("conversation_search", '{"query": "kerberos"}', ctx)
        assert result.ok
        found = json.loads(result.output)
        assert [r["message_id"] for r in found] == [hit.id]
        assert found[0]["conversation_id"] == mine.id and found[0]["agent_id"] == "a1"
        none = await run_tool("conversation_search", '{"query": "\\"kerberos"}', ctx)
        assert none.ok and json.loads(none.output) == []
    unavailable = await run_tool("conversation_search", '{"query": "x"}', _ctx(tmp_path))
    assert not unavailable.ok and "no conversation store" in unavailable.output


async def test_backstop_clamps_huge_outputs(tmp_path: Path) -> None:
    ctx = ToolContext(workspace=tmp_path, agent_id="a", conversation_id="c", output_cap=100_000)
    result = await run_tool("bash", json.dumps({"command": "python3 -c 'print(\"y\" * 50000)'"}), ctx)
    assert result.ok
    assert result.output.endswith("[Output truncated: showing 32,000 of 50,000 characters.]")

"""``conversation_search``'s arguments through ``run_tool``, as a model sends them: each bad one is
one error line naming it, and good ones still reach the store's search."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from orchestrator.models.types import Message
from orchestrator.store import Store
from orchestrator.tools import ToolContext, run_tool

pytestmark = pytest.mark.anyio


@pytest.fixture
async def ctx(tmp_path: Path) -> AsyncIterator[ToolContext]:
    async with Store.opened(tmp_path / "s.sqlite3") as store:
        await store.ensure_agent("a1")
        await store.ensure_agent("a2")
        mine = await store.create_conversation("a1")
        await store.create_conversation("a2", conversation_id="theirs")
        await store.append_message(mine.id, Message(role="user", content="the kerberos ticket expired"))
        yield ToolContext(workspace=tmp_path, agent_id="a1", conversation_id=mine.id, store=store)


async def _search(ctx: ToolContext, **arguments: object) -> tuple[bool, str]:
    result = await run_tool("conversation_search", json.dumps({"query": "kerberos", **arguments}), ctx)
    assert "\n" not in result.output or result.ok, result.output
    return result.ok, result.output


@pytest.mark.parametrize(
    ("arguments", "expected"),
    [
        ({"limit": 1e20}, 'Error: conversation_search: argument "limit" must be a whole number from 1 to 1,000, not 100000000000000000000'),
        ({"limit": 1001}, 'argument "limit" must be a whole number from 1 to 1,000, not 1001'),
        ({"limit": 0}, 'argument "limit" must be a whole number from 1 to 1,000, not 0'),
        ({"limit": -3}, 'argument "limit" must be a whole number from 1 to 1,000, not -3'),
        ({"limit": 2.5}, 'argument "limit" must be integer, not float'),
        ({"start_date": "2026-02-30"}, "argument \"start_date\" is not a real date: '2026-02-30' (day is out of range for month)"),
        ({"end_date": "2026-13-01"}, "argument \"end_date\" is not a real date: '2026-13-01' (month must be in 1..12)"),
        ({"end_date": "2026-01-01T24:30"}, 'argument "end_date" is not a real date'),
        ({"start_date": "yesterday"}, "argument \"start_date\" is not a real date: 'yesterday' (expected YYYY-MM-DD"),
        ({"start_date": "2026-03-02", "end_date": "2026-03-01"}, 'argument "start_date" (2026-03-02) is after "end_date" (2026-03-01)'),
        ({"conversation_id": "theirs"}, "argument \"conversation_id\": none of your conversations has the id 'theirs'"),
        ({"conversation_id": "nowhere"}, "argument \"conversation_id\": none of your conversations has the id 'nowhere'"),
        ({"query": "x" * 2001}, 'argument "query" has 2,001 characters; at most 2,000'),
        ({"start_date": 20260101}, 'argument "start_date" must be string, not int'),
    ],
)
async def test_a_bad_argument_is_one_error_naming_it(ctx: ToolContext, arguments: dict[str, object], expected: str) -> None:
    ok, output = await _search(ctx, **arguments)
    assert not ok
    assert expected in output and output.startswith("Error: ") and "\n" not in output, output


@pytest.mark.parametrize(
    "arguments",
    [
        {},
        {"limit": 1},
        {"limit": 1000},
        {"limit": 5.0},
        {"start_date": "2000-01-01", "end_date": "2999-12-31"},
        {"start_date": "2000-01-01T00:00:00Z", "end_date": "2999-12-31T23:59:59+02:00"},
        {"start_date": " ", "end_date": ""},
        {"start_date": "2026-03-01", "end_date": "2026-03-01"},
    ],
)
async def test_good_arguments_reach_the_search(ctx: ToolContext, arguments: dict[str, object]) -> None:
    ok, output = await _search(ctx, **arguments)
    assert ok, output
    if "2026-03-01" not in arguments.values():
        assert [hit["content"] for hit in json.loads(output)] == ["the kerberos ticket expired"]


async def test_own_conversation_id_scopes_the_search(ctx: ToolContext) -> None:
    ok, output = await _search(ctx, conversation_id=ctx.conversation_id)
    assert ok and len(json.loads(output)) == 1, output

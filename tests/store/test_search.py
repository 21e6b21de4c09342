"""Transcript search: FTS5 trigram + BM25 with COMPACTION-8.2 parsing and the COMPACTION-8.5 result shape."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from orchestrator.models.types import Message, ToolCall
from orchestrator.store import Store, StoreError

pytestmark = pytest.mark.anyio


async def _store(tmp_path: Path) -> tuple[Store, str, str]:
    store = await Store.open(tmp_path / "s.sqlite3")
    await store.ensure_agent("a1")
    await store.ensure_agent("a2")
    c1 = (await store.create_conversation("a1")).id
    c2 = (await store.create_conversation("a1")).id
    return store, c1, c2


async def _q6(store: Store, conv: str) -> list[str]:
    """The Q-6 transcript; returns the stored ids in order."""
    call = ToolCall(id="call1", name="edit_file", arguments='{"path": "login.ts"}')
    stored = await store.append_messages(
        conv,
        [
            Message(role="user", content="please fix the auth bug in login.ts"),
            Message(role="assistant", content="Fixed the auth bug.", tool_calls=(call,)),
            Message(
                role="tool", content="edited login.ts (auth bug)", tool_call_id="call1", name="edit_file"
            ),
        ],
    )
    summary = await store.replace_in_context(
        conv,
        Message(role="user", content="Note: prior messages ... hidden", kind="summary"),
        [],
        metadata={"compaction": {"summary": "I fixed the auth bug", "stats": {"trigger": "manual"}}},
    )
    return [s.id for s in stored] + [summary.id]


async def test_q6_expectations(tmp_path: Path) -> None:
    store, c1, _ = await _store(tmp_path)
    try:
        user, assistant, tool, summary = await _q6(store, c1)
        hits = await store.search("auth bug", agent_id="a1")
        assert {h.message_id for h in hits} == {user, assistant, tool, summary}
        assert {h.message_type for h in hits} == {
            "user_message",
            "assistant_message",
            "tool_return_message",
            "summary_message",
        }
        only_user = await store.search('"fix the auth"', agent_id="a1")
        assert [h.message_id for h in only_user] == [user]
        assert await store.search('"auth bug', agent_id="a1") == []
        summaries = await store.search("summary_message", agent_id="a1")
        assert [h.message_id for h in summaries] == [summary]
        assert await store.search("auth", agent_id="a1", limit=0) == []
        assert await store.search("   ", agent_id="a1") == []
        calls = await store.search("login.ts edit_file", agent_id="a1", message_types=["tool_call_message"])
        assert [h.message_id for h in calls] == [f"{assistant}:tool:call1:request"]
    finally:
        await store.close()


async def test_result_shape(tmp_path: Path) -> None:
    store, c1, _ = await _store(tmp_path)
    try:
        user, assistant, _tool, summary = await _q6(store, c1)
        by_id = {h.message_id: h.as_dict() for h in await store.search("auth", agent_id="a1")}
        u = by_id[user]
        assert list(u) == [
            "id",
            "date",
            "message_type",
            "content",
            "message_id",
            "created_at",
            "agent_id",
            "conversation_id",
        ]
        assert u["id"] == u["message_id"] == user and u["agent_id"] == "a1" and u["conversation_id"] == c1
        assert u["date"] == u["created_at"] and u["created_at"].endswith("Z")
        s = by_id[summary]
        assert s["summary"] == "I fixed the auth bug" and s["compaction_stats"] == {"trigger": "manual"}
        assert "content" not in s
        call = (await store.search("tool_call_message", agent_id="a1"))[0].as_dict()
        assert call["tool_call"] == {
            "name": "edit_file",
            "arguments": '{"path": "login.ts"}',
            "tool_call_id": "call1",
        }
        assert call["created_at"] > by_id[assistant]["created_at"]  # part 1 is dated +1 ms
        json.dumps([h.as_dict() for h in await store.search("auth", agent_id="a1")])
    finally:
        await store.close()


async def test_substring_and_case(tmp_path: Path) -> None:
    store, c1, _ = await _store(tmp_path)
    try:
        m = await store.append_message(
            c1, Message(role="user", content="We discussed AUTHENTICATION   flows")
        )
        assert [h.message_id for h in await store.search("auth", agent_id="a1")] == [m.id]
        assert [h.message_id for h in await store.search('"authentication flows"', agent_id="a1")] == [m.id]
        assert await store.search("auth missing", agent_id="a1") == []  # AND
    finally:
        await store.close()


async def test_short_terms_fall_back_to_like(tmp_path: Path) -> None:
    store, c1, _ = await _store(tmp_path)
    try:
        go = await store.append_message(c1, Message(role="user", content="the go compiler"))
        await store.append_message(c1, Message(role="user", content="the rust compiler"))
        pct = await store.append_message(c1, Message(role="user", content="100% done_x"))
        assert [h.message_id for h in await store.search("go", agent_id="a1")] == [go.id]
        assert [h.message_id for h in await store.search("go compiler", agent_id="a1")] == [go.id]
        assert [h.message_id for h in await store.search("%", agent_id="a1")] == [pct.id]
        assert [h.message_id for h in await store.search("_x", agent_id="a1")] == [pct.id]
    finally:
        await store.close()


@pytest.mark.parametrize(
    "query",
    [
        "auth OR x",
        "auth*",
        "NEAR(auth bug)",
        "text:auth",
        "{text}:auth",
        "auth AND",
        "-auth",
        "^auth",
        '""',
        "'",
        'a"b',
    ],
)
async def test_fts_syntax_cannot_be_injected(tmp_path: Path, query: str) -> None:
    store, c1, _ = await _store(tmp_path)
    try:
        await store.append_message(c1, Message(role="user", content="auth bug"))
        hits = await store.search(query, agent_id="a1")  # never an FTS5 syntax error
        assert hits == []
    finally:
        await store.close()


async def test_literal_operator_words_are_searchable(tmp_path: Path) -> None:
    store, c1, _ = await _store(tmp_path)
    try:
        m = await store.append_message(c1, Message(role="user", content='use NEAR(x) and "quoted" or a*b'))
        assert [h.message_id for h in await store.search("near(x)", agent_id="a1")] == [m.id]
        assert [h.message_id for h in await store.search("a*b", agent_id="a1")] == [m.id]
        assert [h.message_id for h in await store.search('"quoted', agent_id="a1")] == [
            m.id
        ]  # unclosed: kept quote
    finally:
        await store.close()


async def test_scope_hidden_and_dates(tmp_path: Path) -> None:
    store, c1, c2 = await _store(tmp_path)
    try:
        other = (await store.create_conversation("a2")).id
        hidden = (await store.create_conversation("a1", hidden=True)).id
        a = await store.append_message(c1, Message(role="user", content="needle in local haystack"))
        b = await store.append_message(c2, Message(role="user", content="needle two"))
        await store.append_message(other, Message(role="user", content="needle other agent"))
        await store.append_message(hidden, Message(role="user", content="needle hidden fork"))
        assert {h.message_id for h in await store.search("needle", agent_id="a1")} == {a.id, b.id}
        assert [h.message_id for h in await store.search("needle", conversation_id=c2)] == [b.id]
        assert len(await store.search("needle", agent_id="a1", include_hidden=True)) == 3
        assert len(await store.search("needle", all_agents=True)) == 3
        with pytest.raises(StoreError, match="needs an agent id"):
            await store.search("needle")
        legacy = await store.append_message(
            c1,
            Message(role="user", content="legacy needle"),
            metadata={"created_at": "2026-01-02T10:00:00.000Z"},
        )
        assert await store.search("legacy", agent_id="a1", start_date="2027-01-01") == []
        assert [h.message_id for h in await store.search("legacy", agent_id="a1", end_date="2026-01-02")] == [
            legacy.id
        ]
        assert await store.search("legacy", agent_id="a1", end_date="2026-01-01") == []
        assert len(await store.search("legacy", agent_id="a1", start_date="not a date")) == 1
    finally:
        await store.close()


async def test_evicted_messages_stay_searchable(tmp_path: Path) -> None:
    store, c1, _ = await _store(tmp_path)
    try:
        old = await store.append_message(c1, Message(role="user", content="LOCAL_DURABLE_OLD_NEEDLE here"))
        keep = await store.append_message(c1, Message(role="user", content="LOCAL_DURABLE_KEEPER"))
        await store.replace_in_context(
            c1,
            Message(role="user", content="x", kind="summary"),
            [keep.id],
            metadata={"compaction": {"summary": "COMPACTED SUMMARY WITHOUT OLD NEEDLE"}},
        )
        assert [h.message_id for h in await store.search("LOCAL_DURABLE_OLD_NEEDLE", agent_id="a1")] == [
            old.id
        ]
        hits = await store.search('"COMPACTED SUMMARY"', agent_id="a1")
        assert [h.message_type for h in hits] == ["summary_message"]
    finally:
        await store.close()


async def test_bm25_ranks_denser_match_first(tmp_path: Path) -> None:
    store, c1, _ = await _store(tmp_path)
    try:
        filler = " ".join(f"word{i}" for i in range(200))
        sparse = await store.append_message(c1, Message(role="user", content=f"{filler} kerberos {filler}"))
        dense = await store.append_message(c1, Message(role="user", content="kerberos kerberos ticket"))
        hits = await store.search("kerberos", agent_id="a1")
        assert [h.message_id for h in hits] == [dense.id, sparse.id]
        assert hits[0].score <= hits[1].score
        assert [h.message_id for h in await store.search("kerberos", agent_id="a1", limit=1)] == [dense.id]
    finally:
        await store.close()

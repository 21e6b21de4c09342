"""Pure search logic: query parsing (COMPACTION-8.2) and FTS expressions that never break FTS5."""

from __future__ import annotations

import sqlite3

from hypothesis import given, settings
from hypothesis import strategies as st

from orchestrator.store.projection import fts_expression, parse_bound, parse_query


def test_parse_query_vectors() -> None:
    q = parse_query('  fix "the auth" bug  ')
    assert q.terms == ("fix", "bug") and q.phrases == ("the auth",)
    unclosed = parse_query('"auth bug')
    assert unclosed.terms == ('"auth', "bug") and unclosed.phrases == ()
    assert parse_query("   ").empty
    assert parse_query('""').empty
    assert parse_query('a"b c"d').terms == ("a", "d") and parse_query('a"b c"d').phrases == ("b c",)


def test_parse_bound() -> None:
    assert parse_bound("2026-01-02", end=True) == "2026-01-02T23:59:59.999Z"
    assert parse_bound("2026-01-02", end=False) == "2026-01-02T00:00:00.000Z"
    assert parse_bound("2026-01-02T10:00:00+02:00", end=False) == "2026-01-02T08:00:00.000Z"
    assert parse_bound("yesterday", end=False) is None


_CONN = sqlite3.connect(":memory:", check_same_thread=False)
_CONN.execute("CREATE VIRTUAL TABLE t USING fts5(message_type, text, tokenize='trigram')")
_CONN.execute("INSERT INTO t VALUES ('user_message', 'some text with \"quotes\" and near(x) or * ^')")


@settings(max_examples=300, deadline=None)
@given(st.text(max_size=40))
def test_any_query_is_a_valid_fts_expression(query: str) -> None:
    expression = fts_expression(parse_query(query).needles)
    if expression is not None:
        rows = _CONN.execute("SELECT rowid, text FROM t WHERE t MATCH ?", (expression,)).fetchall()
        for _rowid, text in rows:
            for needle in parse_query(query).needles:
                if len(needle) >= 3:
                    assert needle in text.lower()

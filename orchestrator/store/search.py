"""Transcript search (COMPACTION-8, C7/S7): FTS5 trigram for needles of three or
more characters, ranked by BM25; shorter needles filter by ``LIKE`` over a bounded newest-first scan."""

from __future__ import annotations

import sqlite3
from collections.abc import Sequence
from typing import Any

from orchestrator.store.jobs import StoreJobs
from orchestrator.store.projection import (
    Projected,
    fts_expression,
    like_pattern,
    parse_bound,
    parse_query,
    project,
)
from orchestrator.store.records import SearchHit, StoreError
from orchestrator.store.schema import PARTS_PER_MESSAGE
from orchestrator.store.transcript import MSG_COLUMNS, row_to_message

__all__ = ["LIKE_SCAN_MESSAGES", "Search"]

LIKE_SCAN_MESSAGES = 20_000
"""A query whose every needle is under 3 characters scans only this many newest messages in scope."""


class Search(StoreJobs):
    """Mixed into ``Store``: queries over ``search_fts`` joined to the transcript."""

    async def search(
        self,
        query: str,
        *,
        agent_id: str | None = None,
        conversation_id: str | None = None,
        all_agents: bool = False,
        limit: int = 100,
        start_date: str | None = None,
        end_date: str | None = None,
        message_types: Sequence[str] | None = None,
        include_hidden: bool = False,
    ) -> list[SearchHit]:
        """Search the durable transcript (COMPACTION-8, C7/S7).

        Query parsing is 8.2's; every term and phrase must occur as a substring (AND). Needles of 3+
        characters go through FTS5 (trigram) and rank by BM25; shorter ones filter by LIKE, and a query
        made only of short needles scans the newest ``LIKE_SCAN_MESSAGES`` messages in scope, newest
        first. Ties break newest first. Scope: ``agent_id``, ``conversation_id`` (both may be given) or
        ``all_agents=True``; hidden conversations are skipped unless ``include_hidden``."""
        if agent_id is None and conversation_id is None and not all_agents:
            raise StoreError("search needs an agent id, a conversation id or all_agents=True")
        parsed = parse_query(query)
        needles = parsed.needles
        if parsed.empty or not needles or limit <= 0:
            return []
        start = parse_bound(start_date, end=False)
        end = parse_bound(end_date, end=True)
        types = list(message_types) if message_types is not None else None

        def job(conn: sqlite3.Connection) -> list[SearchHit]:
            where = ["(? OR c.hidden = 0)"]
            args: list[Any] = [include_hidden]
            if agent_id is not None:
                where.append("c.agent_id = ?")
                args.append(agent_id)
            if conversation_id is not None:
                where.append("m.conversation_id = ?")
                args.append(conversation_id)
            scope_sql = " AND ".join(where)
            filters: list[str] = []
            fargs: list[Any] = []
            for needle in needles:
                if len(needle) < 3:
                    filters.append("f.text LIKE ? ESCAPE '\\'")
                    fargs.append(like_pattern(needle))
            if start is not None:
                filters.append("f.date >= ?")
                fargs.append(start)
            if end is not None:
                filters.append("f.date <= ?")
                fargs.append(end)
            if types is not None:
                filters.append(f"f.message_type IN ({','.join('?' * len(types))})")
                fargs.extend(types)
            filter_sql = "".join(f" AND {f}" for f in filters)
            expression = fts_expression(needles)
            if expression is not None:
                sql = (
                    f"SELECT h.rowid, h.score, h.agent_id, {MSG_COLUMNS} FROM ("
                    "SELECT f.rowid, bm25(search_fts) AS score, f.date, c.agent_id "
                    "FROM search_fts f JOIN messages m ON m.seq = f.rowid / ? "
                    "JOIN conversations c ON c.id = m.conversation_id "
                    f"WHERE search_fts MATCH ? AND {scope_sql}{filter_sql} "
                    "ORDER BY score, f.date DESC, f.rowid DESC LIMIT ?"
                    ") h JOIN messages m ON m.seq = h.rowid / ? ORDER BY h.score, h.date DESC, h.rowid DESC"
                )
                params = [PARTS_PER_MESSAGE, expression, *args, *fargs, limit, PARTS_PER_MESSAGE]
            else:
                sql = (
                    f"SELECT h.rowid, 0.0, h.agent_id, {MSG_COLUMNS} FROM ("
                    "SELECT f.rowid, f.date, s.agent_id FROM ("
                    "SELECT m.seq, c.agent_id FROM messages m "
                    f"JOIN conversations c ON c.id = m.conversation_id WHERE {scope_sql} ORDER BY m.seq DESC LIMIT ?"
                    ") s JOIN search_fts f ON f.rowid BETWEEN s.seq * ? AND s.seq * ? + ? "
                    f"WHERE 1{filter_sql} ORDER BY f.date DESC, f.rowid DESC LIMIT ?"
                    ") h JOIN messages m ON m.seq = h.rowid / ? ORDER BY h.date DESC, h.rowid DESC"
                )
                params = [
                    *args,
                    LIKE_SCAN_MESSAGES,
                    PARTS_PER_MESSAGE,
                    PARTS_PER_MESSAGE,
                    PARTS_PER_MESSAGE - 1,
                    *fargs,
                    limit,
                    PARTS_PER_MESSAGE,
                ]
            rows = conn.execute(sql, params).fetchall()
            hits: list[SearchHit] = []
            projected: dict[int, list[Projected]] = {}
            for row in rows:
                rowid, score, hit_agent = row[0], row[1], row[2]
                seq, part = divmod(rowid, PARTS_PER_MESSAGE)
                parts = projected.get(seq)
                if parts is None:
                    sm = row_to_message(row[3:])
                    parts = projected[seq] = project(
                        sm.id, sm.message, sm.metadata, sm.created_at, hit_agent, sm.conversation_id
                    )
                p = parts[part]
                hits.append(
                    SearchHit(
                        message_id=p.id,
                        message_type=p.message_type,
                        created_at=p.date,
                        agent_id=hit_agent,
                        conversation_id=row[5],
                        seq=seq,
                        score=float(score),
                        fields=p.fields,
                    )
                )
            return hits

        return await self._run(job)

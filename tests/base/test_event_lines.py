"""Every kind of docs/events.md has a formatted line (V2): named fields, never raw JSON; a model call
says whose it was, a memory commit its source."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest

from orchestrator.base.event_lines import LINE_LIMIT, event_detail

_DOC = Path(__file__).resolve().parents[2] / "docs" / "events.md"


def documented() -> dict[str, list[str]]:
    """kind -> its payload fields, from the tables of docs/events.md."""
    kinds: dict[str, list[str]] = {}
    for line in _DOC.read_text(encoding="utf-8").splitlines():
        cells = [c.strip() for c in line.split("|")]
        if len(cells) < 4 or not re.fullmatch(r"`[a-z_]+\.[a-z_]+`", cells[1]):
            continue
        fields = re.findall(r"`([a-z_]+)`", cells[3])
        kinds.setdefault(cells[1].strip("`"), []).extend(f for f in fields if "." not in f)
    return kinds


def _sample(field: str) -> Any:
    if field in ("commits", "files"):
        return ["0123456789abcdef0123456789abcdef01234567"] if field == "commits" else ["human.md"]
    if field in ("ok", "background"):
        return True
    if field.endswith(("tokens", "_ms", "steps", "messages", "evicted", "turns", "retried")):
        return 7
    return f"<{field}>"


KINDS = documented()


def test_the_docs_list_the_kinds_a_session_records() -> None:
    for kind in ("model.call", "memory.commit", "reflection.review", "reflection.decided", "tool.end", "subagent.failed"):
        assert kind in KINDS, kind
    assert len(KINDS) >= 29


@pytest.mark.parametrize("kind", sorted(KINDS))
def test_every_documented_kind_is_a_formatted_line(kind: str) -> None:
    payload = {field: _sample(field) for field in KINDS[kind]}
    detail = event_detail(kind, payload)
    assert detail and not detail.startswith("{") and '":' not in detail, detail
    assert len(detail) <= LINE_LIMIT
    shown = [f for f in KINDS[kind] if f"<{f}>" in detail]
    assert shown or kind in ("model.call",) or any(str(v) in detail for v in payload.values() if isinstance(v, int)), detail


def test_a_model_call_says_whose_call_it_was() -> None:
    payload = {"model": "m", "prompt_tokens": 5, "completion_tokens": 2, "latency_ms": 9, "purpose": "reflect"}
    assert event_detail("model.call", payload).startswith("reflect m in=5 out=2 9ms")


def test_a_memory_commit_names_its_source_and_files() -> None:
    payload = {"revision": "a" * 40, "previous_revision": "b" * 40, "source": "other", "by": "the other REPL's edit",
               "files": ["human.md"], "operation": "update"}
    assert event_detail("memory.commit", payload) == (
        f"{'a' * 12} other:the other REPL's edit files=human.md previous_revision={'b' * 12}"
    )
    payload["provenance"] = {"source": "agent", "agent": "me", "conversation": "conv-2", "turn": "turn-9"}
    assert event_detail("memory.commit", payload).startswith(f"{'a' * 12} other:the other REPL's edit from=agent@conv-2 ")


def test_an_unknown_kind_is_still_named_fields() -> None:
    assert event_detail("x.new", {"b": 1, "a": {"k": 2}}) == "a=k:2 b=1"

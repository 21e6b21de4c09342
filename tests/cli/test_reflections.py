"""``reverie reflections list`` fits an 80-column terminal and cuts no name: ids, outcomes and a
branch's kind stay whole, the reason wraps and is all there."""

from __future__ import annotations

import io

from rich.console import Console

from orchestrator.cli.reflections import reflections_table

WHY = "the branch and HEAD both changed persona.md in the same lines; merge --resolve hands it to the resolver"


def _rows(kind: str = "reflection") -> list[tuple[str, str, str, str, str]]:
    ids = [f"20261207T2201{n:02d}Z-0000a{n:03d}" for n in range(4)]
    outcomes = ["no_changes", "kept (invalid-combined)", "failed", "merged"]
    return [
        (rid, f"reverie/{kind if n == 1 else 'reflection'}/{rid}", str(n), outcome, WHY if n == 1 else "-")
        for n, (rid, outcome) in enumerate(zip(ids, outcomes, strict=True))
    ]


def _render(rows: list[tuple[str, str, str, str, str]], width: int = 80) -> list[str]:
    out = io.StringIO()
    Console(file=out, width=width, force_terminal=False).print(reflections_table(rows))
    return out.getvalue().splitlines()


def test_names_are_whole_in_80_columns_and_the_reason_wraps() -> None:
    rows = _rows()
    lines = _render(rows)
    assert max(len(line) for line in lines) <= 80
    text = "\n".join(lines)
    assert "…" not in text
    for rid, _, _, outcome, _ in rows:
        assert any(rid in line and outcome in line for line in lines), (rid, outcome, text)
    assert _words(lines) >= set(WHY.split()), text
    assert "branches: reverie/<kind>/<id>" in text


def test_a_branch_of_another_kind_shows_its_kind_and_keeps_its_reason() -> None:
    lines = _render(_rows(kind="compaction"))
    assert max(len(line) for line in lines) <= 80
    at = next(i for i, line in enumerate(lines) if "20261207T220101Z-0000a001" in line)
    assert "(compaction)" in lines[at + 1], "\n".join(lines)
    assert "kept (invalid-combined)" in lines[at] and _words(lines) >= set(WHY.split())


def _words(lines: list[str]) -> set[str]:
    return {word for line in lines for cell in line.split("│") for word in cell.split()}

"""Every reason the repository cites can be read in the repository (docs/design.md).

A decision id (``D11``, a range ``S3-S5``) or a section of the behaviour description (``MEMFS-3.9``,
``TURN-5.15``, ``COMPACTION-7.5``, ``MEMFS-R3.9``) cited in the code, tests, benches, docs or README
must be a ``### <id> — <title>`` heading of docs/design.md. A tracker item cited by number, or a
document outside the repository (the decision list and spec files the ids came from), is a
citation nobody with a clone can follow. Each failure names the file and line.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
DESIGN = ROOT / "docs" / "design.md"
SCANNED = (
    "orchestrator",
    "subagents",
    "tests",
    "bench",
    "docs",
    "prompts",
    "README.md",
    "Makefile",
    "pyproject.toml",
)

DECISION = re.compile(r"(?<!\w)([MTRCSDAPOGF])(\d{1,2})(?:[-–]([MTRCSDAPOGF])(\d{1,2}))?(?!\w|\.\d)")
"""``D4``, ``S12's``, ``C7/S7``, ``D1-D3``; not ``TR-1`` or ``PL-23`` (the spec's test case ids)."""
SECTION = re.compile(r"\b(?:MEMFS|TURN|COMPACTION)-R?\d+(?:\.\d+)*")
"""``MEMFS-3.9``, ``TURN-4.7`` (of "TURN-4.7 item 6"), ``MEMFS-R3.9``; a sentence's full stop is not a part."""
HEADING = re.compile(
    r"^### ((?:[MTRCSDAPOGF]\d{1,2})|(?:MEMFS|TURN|COMPACTION)-R?\d+(?:\.\d+)*) — \S", re.MULTILINE
)
FORBIDDEN = {
    "a tracker item by number: write the reason, or cite its docs/design.md id": re.compile(
        r"\b[Ii]ssues?(?: #?| ?#|-)\d+"
    ),
    "the decision list outside the repository: cite the docs/design.md id": re.compile(r"\bDECISIONS\b"),
    "a spec file outside the repository: cite MEMFS-/TURN-/COMPACTION- ids": re.compile(
        r"\b(?:memfs|turn-loop|compaction)\.md\b|\bturn-loop \d|shared/spec"
    ),
    "a decision id has no sub-number; a numbered requirement is MEMFS-R<n.n>": re.compile(
        r"(?<![\w-])[MTRCSDAPOGF]\d{1,2}\.\d"
    ),
}


def headings() -> set[str]:
    return set(HEADING.findall(DESIGN.read_text(encoding="utf-8")))


def cited(line: str) -> Iterator[str]:
    """Every decision id and spec section ``line`` cites, ranges expanded."""
    for match in DECISION.finditer(line):
        letter, first, end_letter, last = match.groups()
        if end_letter == letter:
            yield from (f"{letter}{n}" for n in range(int(first), int(last) + 1))
        else:
            yield f"{letter}{first}"
            if end_letter:
                yield f"{end_letter}{last}"
    yield from SECTION.findall(line)


def scanned_files() -> Iterator[Path]:
    for name in SCANNED:
        path = ROOT / name
        candidates = [path] if path.is_file() else sorted(path.rglob("*"))
        for file in candidates:
            parts = file.relative_to(ROOT).parts
            if not file.is_file() or file == Path(__file__).resolve():
                continue
            if any(part.startswith(".") or part == "__pycache__" for part in parts):
                continue
            yield file


def lines() -> Iterator[tuple[str, str]]:
    """``(file:line, text)`` of every text line in scope."""
    for file in scanned_files():
        try:
            text = file.read_text(encoding="utf-8")
        except (UnicodeDecodeError, OSError):
            continue
        where = file.relative_to(ROOT).as_posix()
        for number, line in enumerate(text.splitlines(), start=1):
            yield f"{where}:{number}", line


def test_design_headings_are_unique() -> None:
    found = HEADING.findall(DESIGN.read_text(encoding="utf-8"))
    assert found, "docs/design.md has no '### <id> — <title>' headings"
    assert len(found) == len(set(found)), sorted(h for h in found if found.count(h) > 1)


def test_every_cited_id_has_a_heading() -> None:
    known = headings()
    dangling = [f"{where}: {ident}" for where, line in lines() for ident in cited(line) if ident not in known]
    assert not dangling, "cited with no heading in docs/design.md:\n" + "\n".join(dangling)


def test_no_citation_points_outside_the_repository() -> None:
    bad = [
        f"{where}: {match.group(0)!r} ({why})"
        for where, line in lines()
        for why, pattern in FORBIDDEN.items()
        for match in pattern.finditer(line)
    ]
    assert not bad, "\n".join(bad)


@pytest.mark.parametrize(
    ("line", "expected"),
    [
        ("Merge-back (D1-D3, R2-R4, M8).", ["D1", "D2", "D3", "R2", "R3", "R4", "M8"]),
        ("S12's reminder; C7/S7; M4/S11 and D10.", ["S12", "C7", "S7", "M4", "S11", "D10"]),
        (
            "(TURN-4.7 item 6; MEMFS-R3.9, COMPACTION-3.4 to COMPACTION-3.6.)",
            ["TURN-4.7", "MEMFS-R3.9", "COMPACTION-3.4", "COMPACTION-3.6"],
        ),
        ("the TR-1..TR-7 vectors, PB-1, S-1, PL-23, sha256, UTF-8, T1000, kept_dirty", []),
    ],
)
def test_citation_forms(line: str, expected: list[str]) -> None:
    assert sorted(cited(line)) == sorted(expected)


TRACKER = "issue"
"""Spelt apart so that a grep of the repository for tracker citations does not find these samples."""


@pytest.mark.parametrize(
    ("line", "caught"),
    [
        (f"deferred ({TRACKER} 14.4)", True),
        (f'"""{TRACKER.title()} 23 item 2: stale locks', True),
        ("the issue-29 table", True),
        ("see issue #12", True),
        ("(DECISIONS D1)", True),
        ("memfs.md 3.9's key", True),
        ("turn-loop 5.15 step 2", True),
        ("a hit (R3.9)", True),
        ("https://example.org/issues/42 and #42", False),
        ("issue and PR numbers (`#123`)", False),
        ("(MEMFS-R3.9, D4)", False),
    ],
)
def test_forbidden_forms(line: str, caught: bool) -> None:
    assert any(pattern.search(line) for pattern in FORBIDDEN.values()) is caught

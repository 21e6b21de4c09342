"""MEMFS-2: every worked vector of MEMFS-2.3, plus the JS trim family."""

from __future__ import annotations

from collections.abc import Mapping

import pytest

from orchestrator.memfs.frontmatter import (
    FrontmatterValue,
    js_trim,
    js_trim_end,
    js_trim_start,
    parse_frontmatter,
)

_WHOLE = object()

VECTORS: list[tuple[str, Mapping[str, FrontmatterValue], object]] = [
    ("\ufeff---\r\nname: a\r\ndescription: d\r\n---\r\n\r\nBody\r\n\r\n", {"name": "a", "description": "d"}, "Body"),
    ("---\rname: a\r---\rBody", {"name": "a"}, "Body"),
    ("---\n---\nbody\n", {}, "---\n---\nbody\n"),
    ("---\nname: x\n---", {"name": "x"}, ""),
    ("---\nname: x\n---body", {}, _WHOLE),
    ("---\nname: x\n----\nbody\n", {}, _WHOLE),
    ("\n---\nname: a\n---\nx", {}, _WHOLE),
    ('---\nname: "Persona"\ndescription: \'Who\'\n---\nx', {"name": '"Persona"', "description": "'Who'"}, "x"),
    ("---\ndescription: a: b\n---\nx", {"description": "a: b"}, "x"),
    ("---\ndescription:\n  - a\n  - b\n---\nx", {"description": ("a", "b")}, "x"),
    ("---\ndescription:\n---\nx", {"description": ""}, "x"),
    ("---\ndescription:\n   - a\n---\nx", {"description": ""}, "x"),
    (
        "---\ndescription: >\n  line one\n  line two\n\n  para\nname: n\n---\nx",
        {"description": "line one line two\npara\n", "name": "n"},
        "x",
    ),
    ("---\ndescription: |\n  line one\n  line two\n---\nx", {"description": "line one\nline two\n"}, "x"),
    ("---\ndescription: |-\n  line one\n---\nx", {"description": "line one"}, "x"),
    ("---\ndescription: |+\n  line one\n\n---\nx", {"description": "line one\n\n"}, "x"),
    ("---\ndescription: a\ndescription: b\n---\nx", {"description": "b"}, "x"),
    ("---\n  name: a\ndescription: b\n---\nx", {"description": "b"}, "x"),
    ("---\n\tname: a\n---\nx", {}, "x"),
    ("---\njunk line\n:lead\n---\nx", {}, "x"),
    ("---\nname : a \n---\nx", {"name": "a"}, "x"),
    ("---\ndescription: first\n  second\n---\nx", {"description": "first"}, "x"),
    ("---\nname: a\n---\n---\nmore\n---\n", {"name": "a"}, "---\nmore\n---"),
    ("  hello\n\n", {}, "  hello\n\n"),
    ("", {}, ""),
]


@pytest.mark.parametrize(("text", "fields", "body"), VECTORS, ids=[repr(v[0])[:40] for v in VECTORS])
def test_worked_vectors(text: str, fields: Mapping[str, FrontmatterValue], body: object) -> None:
    parsed = parse_frontmatter(text)
    assert dict(parsed.fields) == dict(fields)
    assert list(parsed.fields) == list(fields)
    assert parsed.body == (text if body is _WHOLE else body)


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("---\ndescription: |\n---\nx", "\n"),
        ("---\ndescription: >\n---\nx", "\n"),
        ("---\ndescription: |-\n---\nx", ""),
        ("---\ndescription: |+\n---\nx", "\n"),
        ("---\ndescription: >-\n  a\n\n\n  b\n---\nx", "a\n\nb"),
        ("---\ndescription: >+\n  a\n\n---\nx", "a\n\n"),
        ("---\ndescription: |\n    deep\n  shallow\n---\nx", "  deep\nshallow\n"),
    ],
)
def test_block_scalar_edges(text: str, expected: str) -> None:
    assert parse_frontmatter(text).fields["description"] == expected


def test_unindented_list_items_are_ignored() -> None:
    parsed = parse_frontmatter("---\ndescription:\n- a\n---\nx")
    assert parsed.fields == {"description": ""}


def test_body_without_frontmatter_is_not_trimmed_but_normalised() -> None:
    assert parse_frontmatter("\r\n  x \r").body == "\n  x \n"


def test_frontmatter_presence_flag() -> None:
    assert parse_frontmatter("---\n\n---\n").has_frontmatter
    assert not parse_frontmatter("---\n---\n").has_frontmatter


@pytest.mark.parametrize("ch", ["\ufeff", "\u00a0", "\u3000", "\u2028", "\u205f", "\x0b", "\t"])
def test_js_trim_removes_js_whitespace(ch: str) -> None:
    assert js_trim(f"{ch}a{ch}") == "a"
    assert js_trim_start(f"{ch}a{ch}") == f"a{ch}"
    assert js_trim_end(f"{ch}a{ch}") == f"{ch}a"


@pytest.mark.parametrize("ch", ["\x1c", "\x1f", "\x85", "\u200b"])
def test_js_trim_keeps_what_python_strip_would_remove(ch: str) -> None:
    assert js_trim(f"{ch}a{ch}") == f"{ch}a{ch}"

"""COMPACTION-7 truncation: the COMPACTION-9.6 vectors (TR-1..TR-7), COMPACTION-7.6's clip, and properties."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from orchestrator.tools.truncation import (
    clip_tool_result,
    truncate_array,
    truncate_by_chars,
    truncate_by_lines,
)


def test_tr1_middle_chars() -> None:
    out = truncate_by_chars("a" * 1000, 500)
    assert out == "a" * 250 + "\n... [500 characters omitted] ...\n" + "a" * 250 + (
        "\n\n[Output truncated: showing 500 of 1,000 characters.]"
    )


def test_tr2_unchanged_at_limit() -> None:
    assert truncate_by_chars("a" * 500, 500) == "a" * 500


def test_tr3_lines() -> None:
    text = "\n".join(f"Line {i}" for i in range(1, 101))
    out = truncate_by_lines(text, 50)
    body, notice = out.split("\n\n")
    shown = body.split("\n")
    assert len(shown) == 51
    assert shown[24] == "Line 25" and shown[25] == "... [50 lines omitted] ..." and shown[26] == "Line 76"
    assert notice == "[Output truncated: showing 50 of 100 lines.]"


def test_tr4_long_lines() -> None:
    out = truncate_by_lines("short\n" + "a" * 1000 + "\nshort", 10, 500)
    assert out == "short\n" + "a" * 500 + "... [line truncated]\nshort\n\n" + (
        "[Some lines exceeded 500 characters and were truncated.]"
    )


def test_tr5_array() -> None:
    items = [f"item{i}" for i in range(1, 101)]
    out = truncate_array(items, 50, lambda xs: "\n".join(xs), "items")
    lines = out.split("\n")
    assert lines[0] == "item1" and lines[24] == "item25" and lines[25] == "item76" and lines[49] == "item100"
    assert out.endswith("\n\n[Output truncated: showing 50 of 100 items.]\n[50 items omitted from middle.]")


def test_tr6_head_mode() -> None:
    assert (
        truncate_by_chars("a" * 20, 10, middle=False)
        == "aaaaaaaaaa\n\n[Output truncated: showing 10 of 20 characters.]"
    )


def test_tr7_odd_max() -> None:
    expected = (
        "aaaaa\n... [11 characters omitted] ...\naaaaa\n\n[Output truncated: showing 10 of 21 characters.]"
    )
    assert truncate_by_chars("a" * 21, 10) == expected


def test_overflow_notice_lines() -> None:
    out = truncate_by_chars("x" * 30, 10, overflow_path="/tmp/f.txt")
    assert out.endswith(
        "[Output truncated: showing 10 of 30 characters.]\n[Full output written to: /tmp/f.txt]"
    )
    lines = truncate_by_lines("a\nb\nc", 2, overflow_path="/p")
    assert lines.endswith("[Output truncated: showing 2 of 3 lines.] [Full output written to: /p]")


def test_clip_example() -> None:
    text = "h" * 30_000 + "t" * 30_000
    out = clip_tool_result(text)
    assert len(out) <= 40_000 and out.startswith("h") and out.endswith("t" * 100)
    assert "[Tool result truncated during local transcript repair: omitted " in out


@given(st.text(max_size=300), st.integers(min_value=2, max_value=200))
def test_chars_properties(text: str, limit: int) -> None:
    out = truncate_by_chars(text, limit)
    if len(text) <= limit:
        assert out == text
    else:
        half = limit // 2
        assert out.startswith(text[:half]) and f"showing {limit:,} of {len(text):,} characters" in out
        assert out.split("\n... [")[1].split(" characters omitted")[0] == f"{len(text) - limit:,}"


@given(st.text(max_size=2000), st.integers(min_value=100, max_value=1500))
def test_clip_properties(text: str, limit: int) -> None:
    out = clip_tool_result(text, limit)
    assert len(out) <= limit
    if len(text) <= limit:
        assert out == text
    else:
        omitted = int(out.split("omitted ")[1].split(" chars]")[0])
        assert len(out) - len(out.split("\n[Tool result")[0]) > 0
        assert omitted == len(text) - (
            len(out)
            - len(f"\n[Tool result truncated during local transcript repair: omitted {omitted} chars]\n")
        )


@given(
    st.lists(st.text(alphabet="abc ", max_size=30), min_size=1, max_size=60),
    st.integers(min_value=2, max_value=40),
)
def test_lines_keep_head_and_tail(lines: list[str], max_lines: int) -> None:
    text = "\n".join(lines)
    out = truncate_by_lines(text, max_lines)
    if len(lines) <= max_lines:
        assert out == text
    else:
        shown = out.split("\n\n[Output truncated")[0].split("\n")
        half = max_lines // 2
        assert shown[:half] == lines[:half] and shown[len(shown) - half :] == lines[len(lines) - half :]

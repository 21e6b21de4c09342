"""MEMFS-3.9: labels sort as ICU en-US (JavaScript localeCompare under Bun)."""

from __future__ import annotations

import random
import subprocess
import sys

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from orchestrator.memfs.collation import collation_key, compare_labels, sorted_by_collation

_PRIMARY = "\t\n\x0b\x0c\r _-,;:!?.'\"()[]{}@*/\\&#%`^+<=>|~$0123456789abcdefghijklmnopqrstuvwxyz"
_RANK = {ch: i for i, ch in enumerate(_PRIMARY)} | {ch.upper(): _PRIMARY.index(ch) for ch in "abcdefghijklmnopqrstuvwxyz"}


def _ascii_oracle(text: str) -> tuple[tuple[int, ...], tuple[int, ...]]:
    """The ASCII key of MEMFS-3.9, verified there against Node on 12,000 strings."""
    kept = [ch for ch in text if ch in _RANK]
    return tuple(_RANK[ch] for ch in kept), tuple(1 if ch.isupper() else 0 for ch in kept)


def _sort(words: list[str]) -> list[str]:
    return sorted_by_collation(words, key=lambda w: w)


@pytest.mark.parametrize(
    "ordered",
    [
        ["_notes", "-dash", "@x", "#x", "~x", "10", "9", "a", "A", "b"],
        ["10", "2", "9"],
        ["a10", "a2"],
        ["ab", "aB", "Ab", "AB"],
        ["memory", "Memory", "MEMORY"],
        ["a", "a b", "a_b", "a-b", "a.b", "a1", "ab"],
        ["cafe", "café", "Über"],
        ["", ".hidden", "human", "persona"],
    ],
)
def test_documented_orders(ordered: list[str]) -> None:
    shuffled = ordered[:]
    random.Random(7).shuffle(shuffled)
    assert _sort(shuffled) == ordered


def test_control_characters_are_ignored_but_whitespace_controls_are_not() -> None:
    assert compare_labels("a\x01b", "ab") == 0
    assert compare_labels("a\tb", "ab") < 0


def test_sort_is_stable_for_equal_keys() -> None:
    items = [("ab", 1), ("a\x01b", 2), ("ab", 3)]
    assert sorted_by_collation(items, key=lambda item: item[0]) == items


def test_compare_agrees_with_keys() -> None:
    assert compare_labels("a", "B") < 0 < compare_labels("b", "A")
    assert collation_key("a") < collation_key("B")


_ASCII = st.text(alphabet=st.sampled_from([chr(i) for i in range(0x20, 0x7F)] + ["\t", "\n", "\x01"]), max_size=8)


@settings(max_examples=300)
@given(st.lists(_ASCII, min_size=2, max_size=12))
def test_icu_matches_the_spec_ascii_key(words: list[str]) -> None:
    """ICU's order (``collation_key``), the sort that skips ICU for ASCII strings, and the key of the
    spec agree."""
    assert sorted(words, key=collation_key) == sorted(words, key=_ascii_oracle) == _sort(words)


def test_a_sort_of_ascii_strings_does_not_load_icu() -> None:
    """ICU is about 20 MB of resident memory; a chat whose labels are ASCII never maps it."""
    code = (
        "import sys\n"
        "from orchestrator.memfs.collation import sorted_by_collation\n"
        "assert sorted_by_collation(['b', 'A', 'a', '_x'], key=str) == ['_x', 'a', 'A', 'b']\n"
        "assert 'icu' not in sys.modules\n"
        "assert sorted_by_collation(['Über', 'cafe', 'café'], key=str) == ['cafe', 'café', 'Über']\n"
        "assert 'icu' in sys.modules\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True)

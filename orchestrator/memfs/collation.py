"""Label ordering as JavaScript ``localeCompare`` orders it under Bun: ICU ``en-US`` (M4).

MEMFS-3.9 gives a pure-Python key that reproduces that order exactly for ASCII strings (MEMFS-R3.5's
fast path). :func:`sorted_by_collation` uses it when every string it sorts is ASCII, as labels and
skill paths almost always are, and ICU otherwise. Not for speed (ICU's ``getSortKey`` is about twice
as fast on 1,000 labels) but for memory: loading ICU maps its data and libraries, about 20 MB of a
chat session's resident memory (P8), for a sort of a few dozen names. ``collation_key`` and
``compare_labels`` are ICU's, which the tests hold against the ASCII key.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, Final, TypeVar

if TYPE_CHECKING:
    import icu

__all__ = ["collation_key", "compare_labels", "sorted_by_collation"]

_T = TypeVar("_T")


@functools.cache
def _collator() -> icu.Collator:
    """One shared collator: ICU's const operations (compare, sort keys) are thread-safe. ICU is
    imported here, on first use: a turn that reuses its cached prompt and has no skills sorts nothing."""
    import icu

    return icu.Collator.createInstance(icu.Locale("en-US"))


def collation_key(text: str) -> bytes:
    """ICU ``en-US`` tertiary sort key; compare keys with ``<`` to order strings."""
    key: bytes = _collator().getSortKey(text)
    return key


def compare_labels(a: str, b: str) -> int:
    """``a.localeCompare(b)``: negative, zero or positive."""
    result: int = _collator().compare(a, b)
    return result


_PRIMARY: Final = "\t\n\x0b\x0c\r _-,;:!?.'\"()[]{}@*/\\&#%`^+<=>|~$0123456789abcdefghijklmnopqrstuvwxyz"
_RANK: Final = {ch: i for i, ch in enumerate(_PRIMARY)} | {ch.upper(): _PRIMARY.index(ch) for ch in "abcdefghijklmnopqrstuvwxyz"}


def _ascii_key(text: str) -> tuple[tuple[int, ...], tuple[int, ...]]:
    """MEMFS-3.9's key for an ASCII string: primary ranks, then upper case after lower case;
    the other control characters are ignored."""
    kept = [ch for ch in text if ch in _RANK]
    return tuple(_RANK[ch] for ch in kept), tuple(1 if "A" <= ch <= "Z" else 0 for ch in kept)


def sorted_by_collation(items: Iterable[_T], key: Callable[[_T], str]) -> list[_T]:
    """Stable sort of ``items`` by the collation of ``key(item)`` (the ASCII key when all are ASCII)."""
    pairs = [(key(item), item) for item in items]
    if all(text.isascii() for text, _ in pairs):
        return [item for _, item in sorted(pairs, key=lambda pair: _ascii_key(pair[0]))]
    return [item for _, item in sorted(pairs, key=lambda pair: collation_key(pair[0]))]

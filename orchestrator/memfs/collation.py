"""Label ordering as JavaScript ``localeCompare`` orders it under Bun: ICU ``en-US`` (DECISIONS M4).

memfs.md 3.9 describes a pure-Python ASCII key as an optional fast path. Measured on 1,000 labels
ICU's ``getSortKey`` is about twice as fast as the pure-Python key, so only ICU is used; the ASCII
key survives in the tests as an independent oracle for ICU's order.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, TypeVar

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


def sorted_by_collation(items: Iterable[_T], key: Callable[[_T], str]) -> list[_T]:
    """Stable sort of ``items`` by the collation of ``key(item)``."""
    return sorted(items, key=lambda item: collation_key(key(item)))

"""Tool output truncation, byte for byte as COMPACTION-7 specifies. Pure functions: the
overflow file (7.5) is written by the caller, which passes its path in."""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import TypeVar

__all__ = [
    "BASH_OUTPUT_CHARS",
    "READ_MAX_CHARS_PER_LINE",
    "READ_MAX_LINES",
    "READ_OUTPUT_CHARS",
    "TOOL_RETURN_MAX_CHARS",
    "TRANSCRIPT_CLIP_CHARS",
    "clip_middle",
    "clip_tool_result",
    "truncate_array",
    "truncate_by_chars",
    "truncate_by_lines",
]

BASH_OUTPUT_CHARS = 30_000
READ_MAX_LINES = 2_000
READ_MAX_CHARS_PER_LINE = 2_000
READ_OUTPUT_CHARS = 30_000
TOOL_RETURN_MAX_CHARS = 32_000
TRANSCRIPT_CLIP_CHARS = 40_000

T = TypeVar("T")


def truncate_by_chars(text: str, limit: int, *, middle: bool = True, overflow_path: str | None = None) -> str:
    """7.2: keep head and tail (middle mode) or the head, then the notice lines."""
    if len(text) <= limit:
        return text
    if middle:
        half = limit // 2
        tail = text[-half:] if half > 0 else ""
        body = text[:half] + f"\n... [{len(text) - limit:,} characters omitted] ...\n" + tail
    else:
        body = text[:limit]
    notices = [f"[Output truncated: showing {limit:,} of {len(text):,} characters.]"]
    if overflow_path is not None:
        notices.append(f"[Full output written to: {overflow_path}]")
    return body + "\n\n" + "\n".join(notices)


def truncate_by_lines(
    text: str,
    max_lines: int,
    max_chars_per_line: int | None = None,
    *,
    middle: bool = True,
    overflow_path: str | None = None,
) -> str:
    """7.3: select lines (middle marker or head), cut long lines, then notices joined by a space."""
    lines = text.split("\n")
    count = len(lines)
    lines_cut = count > max_lines
    if lines_cut and middle:
        half = max_lines // 2
        tail = lines[-half:] if half > 0 else []
        selected = [*lines[:half], f"... [{count - max_lines:,} lines omitted] ...", *tail]
    else:
        selected = lines[:max_lines]
    long_cut = False
    if max_chars_per_line is not None:
        out = []
        for line in selected:
            if len(line) > max_chars_per_line:
                out.append(line[:max_chars_per_line] + "... [line truncated]")
                long_cut = True
            else:
                out.append(line)
        selected = out
    body = "\n".join(selected)
    if not lines_cut and not long_cut:
        return body
    notices = []
    if lines_cut:
        notices.append(f"[Output truncated: showing {max_lines:,} of {count:,} lines.]")
    if long_cut:
        notices.append(f"[Some lines exceeded {max_chars_per_line:,} characters and were truncated.]")
    if overflow_path is not None:
        notices.append(f"[Full output written to: {overflow_path}]")
    return body + "\n\n" + " ".join(notices)


def truncate_array(
    items: Sequence[T],
    limit: int,
    formatter: Callable[[Sequence[T]], str],
    item_type: str,
    *,
    middle: bool = True,
    overflow_path: str | None = None,
) -> str:
    """7.3: keep the first and last ``limit // 2`` items (middle mode, no marker) or the first ``limit``."""
    n = len(items)
    if n <= limit:
        return formatter(items)
    if middle:
        half = limit // 2
        selected = [*items[:half], *(items[-half:] if half > 0 else [])]
    else:
        selected = list(items[:limit])
    notices = [f"[Output truncated: showing {limit:,} of {n:,} {item_type}.]"]
    if middle:
        notices.append(f"[{n - limit:,} {item_type} omitted from middle.]")
    if overflow_path is not None:
        notices.append(f"[Full output written to: {overflow_path}]")
    return formatter(selected) + "\n\n" + "\n".join(notices)


def _clip_marker(omitted: int) -> str:
    return f"\n[Tool result truncated during local transcript repair: omitted {omitted} chars]\n"


def clip_middle(text: str, max_chars: int, marker: Callable[[int], str]) -> str:
    """Cut ``text`` to about ``max_chars`` by dropping its middle, marker included in the budget.

    Two passes settle the marker's own length (its number of omitted characters depends on it), as
    in COMPACTION-7.6; head gets the odd character so the tail, usually the newest text, is whole.
    A clip never yields more characters than it removes: when the marker would not be shorter than
    what it replaces, ``text`` comes back whole (the caller decides what else to give up).
    """
    if len(text) <= max_chars:
        return text
    omitted = len(text) - max_chars
    head = tail = 0
    for _ in range(2):
        keep = max(0, max_chars - len(marker(omitted)))
        head = math.ceil(keep / 2)
        tail = keep - head
        omitted = len(text) - head - tail
    clipped = text[:head] + marker(omitted) + (text[-tail:] if tail > 0 else "")
    return clipped if len(clipped) < len(text) else text


def clip_tool_result(text: str, limit: int = TRANSCRIPT_CLIP_CHARS) -> str:
    """7.6: the transcript-load clip; at most ``limit`` characters, head and tail kept."""
    return clip_middle(text, limit, _clip_marker)

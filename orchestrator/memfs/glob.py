"""The glob dialect of ``.memfs.config.json`` (MEMFS-4.8).

Patterns match a whole repository-relative path, case-sensitively. ``**/`` is zero or more whole
directories, a final ``**`` is anything (``/`` included), ``*`` is a run of non-``/`` characters and
``?`` one non-``/`` character; everything else is literal (no classes, braces or negation).
The reference compiles to a JavaScript regular expression whose ``.`` stops at line terminators;
the translation keeps that, so a name containing a newline matches exactly as it does there.
"""

from __future__ import annotations

import re
from functools import lru_cache
from typing import Final

__all__ = ["compile_glob", "glob_matches", "pattern_error"]

_ANY: Final = "[^\\n\\r\\u2028\\u2029]*"


@lru_cache(maxsize=256)
def compile_glob(pattern: str) -> re.Pattern[str]:
    """The anchored regular expression for ``pattern`` (use with ``fullmatch``)."""
    parts: list[str] = []
    i = 0
    n = len(pattern)
    while i < n:
        ch = pattern[i]
        if ch == "*":
            if i + 1 < n and pattern[i + 1] == "*":
                if i + 2 < n and pattern[i + 2] == "/":
                    parts.append(f"(?:{_ANY}/)?")
                    i += 3
                else:
                    parts.append(_ANY)
                    i += 2
            else:
                parts.append("[^/]*")
                i += 1
            continue
        parts.append("[^/]" if ch == "?" else re.escape(ch))
        i += 1
    return re.compile("".join(parts), re.DOTALL)


def glob_matches(pattern: str, path: str) -> bool:
    """Whether ``path`` matches ``pattern`` as a whole."""
    return compile_glob(pattern).fullmatch(path) is not None


def pattern_error(pattern: object, label: str) -> str | None:
    """The config error for an unusable pattern (MEMFS-4.7 pattern check), else None."""
    if (
        not isinstance(pattern, str)
        or not pattern
        or pattern.startswith("/")
        or "\\" in pattern
        or ".." in pattern.split("/")
    ):
        return f"{label}: pattern must be a non-empty repo-relative glob using '/'"
    if any("**" in segment and segment != "**" for segment in pattern.split("/")):
        return f"{label}: '**' must be a complete path segment"
    return None

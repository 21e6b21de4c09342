"""Frontmatter parsing exactly as letta-code's ``parseFrontmatter`` (MEMFS-2).

No YAML library: the reference parser is deliberately small (no quote stripping, no escapes, no
flow sequences) and the compiled prompt must match it byte for byte.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Final

__all__ = [
    "JS_WHITESPACE",
    "Frontmatter",
    "FrontmatterValue",
    "js_trim",
    "js_trim_end",
    "js_trim_start",
    "normalize_newlines",
    "parse_frontmatter",
]

FrontmatterValue = str | tuple[str, ...]

JS_WHITESPACE: Final = (
    "\t\n\x0b\x0c\r \u00a0\u1680"
    "\u2000\u2001\u2002\u2003\u2004\u2005\u2006\u2007\u2008\u2009\u200a"
    "\u2028\u2029\u202f\u205f\u3000\ufeff"
)
_WS: Final = frozenset(JS_WHITESPACE)


def js_trim(text: str) -> str:
    """JavaScript ``String.prototype.trim`` (``str.strip()`` uses a different set)."""
    return text.strip(JS_WHITESPACE)


def js_trim_start(text: str) -> str:
    """JavaScript ``trimStart``."""
    return text.lstrip(JS_WHITESPACE)


def js_trim_end(text: str) -> str:
    """JavaScript ``trimEnd``."""
    return text.rstrip(JS_WHITESPACE)


def _empty_fields() -> Mapping[str, FrontmatterValue]:
    return MappingProxyType({})


@dataclass(frozen=True, slots=True)
class Frontmatter:
    """Parsed frontmatter: ``fields`` is empty when the text has no frontmatter block."""

    fields: Mapping[str, FrontmatterValue] = field(default_factory=_empty_fields)
    body: str = ""
    has_frontmatter: bool = False


def normalize_newlines(text: str) -> str:
    """Drop one leading BOM, then CRLF and lone CR become LF (MEMFS-2.1 step 1)."""
    if text.startswith("\ufeff"):
        text = text[1:]
    return text.replace("\r\n", "\n").replace("\r", "\n")


def _find_block(text: str) -> tuple[str, str] | None:
    """(frontmatter text, raw body) per the lazy regex of MEMFS-2.1 step 2."""
    if not text.startswith("---\n"):
        return None
    j = text.find("\n---", 4)
    while j >= 0:
        k = j + 4
        if k == len(text):
            return text[4:j], ""
        if text[k] == "\n":
            return text[4:j], text[k + 1 :]
        j = text.find("\n---", j + 1)
    return None


def _indent(line: str) -> int:
    n = 0
    for ch in line:
        if ch not in _WS:
            break
        n += 1
    return n


def _is_blank(line: str) -> bool:
    return not js_trim(line)


def _block_scalar(lines: list[str], style: str, chomp: str) -> str:
    indents = [_indent(line) for line in lines if not _is_blank(line)]
    ci = min(indents) if indents else 0
    dedented = ["" if _is_blank(line) else line[ci:] for line in lines]
    if style == "|":
        value = "\n".join(dedented)
    else:
        value = ""
        blanks = 0
        for line in dedented:
            if line == "":
                blanks += 1
                continue
            if blanks > 0:
                value += "\n" * blanks
            elif value:
                value += " "
            value += line
            blanks = 0
        value += "\n" * blanks
    if chomp == "+":
        return value + "\n"
    value = value.rstrip("\n")
    return value if chomp == "-" else value + "\n"


_BLOCK_INDICATORS: Final = frozenset({"|", ">", "|+", "|-", ">+", ">-"})


def _parse_fields(block: str) -> dict[str, FrontmatterValue]:
    fields: dict[str, FrontmatterValue] = {}
    pending_key: str | None = None
    pending_list: list[str] = []
    lines = block.split("\n")
    i = 0
    while i < len(lines):
        line = lines[i]
        i += 1
        indent = _indent(line)
        if indent > 0:
            stripped = js_trim(line)
            if indent <= 2 and stripped.startswith("-") and pending_key is not None:
                pending_list.append(js_trim(stripped[1:]))
            continue
        if pending_key is not None:
            fields[pending_key] = tuple(pending_list) if pending_list else ""
            pending_key, pending_list = None, []
        c = line.find(":")
        if c <= 0:
            continue
        key = js_trim(line[:c])
        value = js_trim(line[c + 1 :])
        if value in _BLOCK_INDICATORS:
            collected: list[str] = []
            while i < len(lines) and (_is_blank(lines[i]) or _indent(lines[i]) > 0):
                collected.append(lines[i])
                i += 1
            fields[key] = _block_scalar(collected, value[0], value[1:])
        elif value:
            fields[key] = value
        else:
            pending_key, pending_list = key, []
    if pending_key is not None:
        fields[pending_key] = tuple(pending_list) if pending_list else ""
    return fields


def parse_frontmatter(text: str) -> Frontmatter:
    """Parse ``text`` (a blob decoded as UTF-8 with replacement) per MEMFS-2.1 to MEMFS-2.2.

    Without a frontmatter block the body is the normalised text, untrimmed; with one, the body is
    JS-trimmed on both ends.
    """
    normalized = normalize_newlines(text)
    found = _find_block(normalized)
    if found is None:
        return Frontmatter(body=normalized)
    block, raw_body = found
    return Frontmatter(
        fields=MappingProxyType(_parse_fields(block)),
        body=js_trim(raw_body),
        has_frontmatter=True,
    )

"""Per-file frontmatter rules of the pre-commit hook (MEMFS-4.5).

These are the hook's own line-based checks, deliberately not the compiler's parser
(``frontmatter.parse_frontmatter``): content is split on LF without normalising BOM or CRLF, so a
file the compiler would read can still be rejected here (``---\\r`` does not open frontmatter).
Every message starts with ``{path}: `` and is the reference's text byte for byte, except
``name_error``: reverie's own rule (D10, a deliberate deviation) against names that would
inject markup into the compiled prompt (``<``, ``>``, control characters) and, a choice of reverie's
own, names that are not UTF-8 (they cannot be shown or labelled faithfully). Its message shows
the path with those characters escaped, so it stays one line. ``name_error`` also refuses a name
whose label would be one of reverie's structural tags (``markup.STRUCTURAL_TAGS``: a root file
``system-reminder.md`` renders as a ``<system-reminder>`` block), and ``markup_errors`` a
``description`` or ``name`` field holding such a tag or the file's own label (A7). That
rule reads the fields with the compiler's parser, since what it guards is what the prompt shows.
"""

from __future__ import annotations

import unicodedata
from typing import Final

from orchestrator.memfs.frontmatter import parse_frontmatter
from orchestrator.memfs.layout import ROOT_INDEX, label_from_path
from orchestrator.memfs.markup import STRUCTURAL_TAGS, label_tags, structural_tags_in

__all__ = [
    "LEGACY_ALLOWED_KEYS",
    "V2_ALLOWED_KEYS",
    "legacy_frontmatter_errors",
    "legacy_value",
    "markup_errors",
    "name_error",
    "v2_frontmatter_errors",
]

V2_ALLOWED_KEYS: Final = ("name", "description")
LEGACY_ALLOWED_KEYS: Final = ("description", "read_only", "limit")
_DELIMITER: Final = "---"
_PROTECTED: Final = "read_only"


def _block(lines: list[str]) -> list[str] | None:
    """The lines between the opening ``---`` (line 0) and the first closing ``---``, else None."""
    for index in range(1, len(lines)):
        if lines[index] == _DELIMITER:
            return lines[1:index]
    return None


def _strip_spaces(text: str) -> str:
    return text.strip(" ")


def _opening_errors(path: str, lines: list[str]) -> tuple[list[str] | None, list[str]]:
    if lines[0] != _DELIMITER:
        return None, [f"{path}: missing frontmatter (must start with ---)"]
    block = _block(lines)
    if block is None:
        return None, [f"{path}: frontmatter opened but never closed (missing closing ---)"]
    return block, []


def v2_frontmatter_errors(path: str, content: str) -> list[str]:
    """Errors of one staged v2 memory file; indexes (last segment ``MEMORY.md``) only lack frontmatter."""
    lines = content.split("\n")
    if path.rsplit("/", 1)[-1] == "MEMORY.md":
        return [f"{path}: MEMORY.md must not have frontmatter"] if lines[0] == _DELIMITER else []
    block, errors = _opening_errors(path, lines)
    if block is None:
        return errors
    seen: set[str] = set()
    allowed = " ".join(V2_ALLOWED_KEYS)
    for line in block:
        if not line:
            continue
        key, colon, value = line.partition(":")
        key = _strip_spaces(key)
        value = _strip_spaces(value if colon else line)
        if key not in V2_ALLOWED_KEYS:
            errors.append(f"{path}: unknown frontmatter key '{key}' (allowed: {allowed})")
            continue
        if key in seen:
            errors.append(f"{path}: duplicate frontmatter key '{key}'")
        seen.add(key)
        if value in ("", '""', "''"):
            errors.append(f"{path}: '{key}' must not be empty")
    for key in V2_ALLOWED_KEYS:
        if key not in seen:
            errors.append(f"{path}: missing required field '{key}'")
    return errors


def legacy_value(text: str, key: str) -> str:
    """Values of the frontmatter lines starting with ``key:``, space-trimmed and LF-joined.

    Mirrors the reference's ``get_fm_value``; ``""`` when absent or the frontmatter is not closed.
    """
    block = _block(text.split("\n"))
    if block is None:
        return ""
    prefix = key + ":"
    values = [_strip_spaces(line[len(prefix) :]) for line in block if line.startswith(prefix)]
    return "\n".join(values).rstrip("\n")


def legacy_frontmatter_errors(
    path: str, content: str, previous: str | None, *, protect: bool = True
) -> list[str]:
    """Errors of one staged legacy (v1) memory file; ``previous`` is its ``HEAD`` text or None.

    A ``HEAD`` text made only of line breaks counts as absent, as it does for the reference's shell
    check. ``protect=False`` (audits of committed trees, which have no "change" to judge) skips the
    ``read_only`` protection rules and keeps the structural ones.
    """
    if previous is not None and not previous.rstrip("\n"):
        previous = None
    block, errors = _opening_errors(path, content.split("\n"))
    if block is None:
        return errors
    head_read_only = legacy_value(previous, _PROTECTED) if previous is not None and protect else ""
    if head_read_only == "true":
        return [f"{path}: file is read_only and cannot be modified"]
    allowed = " ".join(LEGACY_ALLOWED_KEYS)
    has_description = False
    for line in block:
        if not line or line[0] in " \t":
            continue
        key, colon, value = line.partition(":")
        key = key.replace(" ", "")
        value = _strip_spaces(value if colon else line)
        if key not in LEGACY_ALLOWED_KEYS:
            errors.append(f"{path}: unknown frontmatter key '{key}' (allowed: {allowed})")
            continue
        if key == _PROTECTED and protect:
            if previous is None:
                errors.append(f"{path}: '{key}' is a protected field and cannot be set by the agent")
            elif value != head_read_only:
                errors.append(f"{path}: '{key}' is a protected field and cannot be changed by the agent")
        if key == "description":
            has_description = True
            if not value:
                errors.append(f"{path}: 'description' must not be empty")
    if not has_description:
        errors.append(f"{path}: missing required field 'description'")
    if protect and previous is not None and head_read_only and not legacy_value(content, _PROTECTED):
        errors.append(f"{path}: '{_PROTECTED}' is a protected field and cannot be removed by the agent")
    return errors


_NAMED_CONTROLS: Final = {"\n": "\\n", "\t": "\\t", "\r": "\\r"}


def _shown_name(path: str) -> str:
    out = []
    for ch in path:
        code = ord(ch)
        if 0xDC80 <= code <= 0xDCFF:
            out.append(f"\\x{code - 0xDC00:02x}")
        elif unicodedata.category(ch) == "Cc":
            out.append(_NAMED_CONTROLS.get(ch, f"\\x{code:02x}"))
        else:
            out.append(ch)
    return "".join(out)


def name_error(path: str) -> str | None:
    """D10: the one-line error for a memory path the hook refuses, or None when the name is fine.

    ``path`` is the name as read from git with ``surrogateescape`` (a byte that is not UTF-8 is a
    lone surrogate)."""
    tag = _tag_name(path)
    if tag is not None:
        return (
            f"{_shown_name(path)}: invalid memory path: it would be rendered as <{tag}>, a tag reverie's "
            "prompt is built from; rename it"
        )
    found = []
    if "<" in path or ">" in path:
        found.append("'<' or '>'")
    if any(unicodedata.category(ch) == "Cc" for ch in path):
        found.append("a control character")
    if any(0xD800 <= ord(ch) <= 0xDFFF for ch in path):
        found.append("bytes that are not UTF-8")
    if not found:
        return None
    return (
        f"{_shown_name(path)}: invalid memory path: the name contains {' and '.join(found)}; "
        "rename it (memory paths must not contain <, >, control characters or non-UTF-8 bytes)"
    )


def _tag_name(path: str) -> str | None:
    """The label segment of ``path`` that would render as a structural tag: a root file's label (v2)
    or a segment under ``system/`` (v1 nests one tag per segment). The index ``MEMORY.md`` is never
    rendered as a tag."""
    if path == ROOT_INDEX or not path.endswith(".md"):
        return None
    segments = label_tags(label_from_path(path))
    rendered = segments if len(segments) == 1 else segments[1:] if segments[0] == "system" else ()
    return next((segment for segment in rendered if segment.lower() in STRUCTURAL_TAGS), None)


def markup_errors(path: str, content: str) -> list[str]:
    """Item 7: one error per ``description``/``name`` field of ``path`` that holds a structural tag
    or the file's own label, naming the tag, so nothing in memory can forge the prompt's blocks."""
    fields = parse_frontmatter(content).fields
    errors = []
    for key in ("description", "name"):
        value = fields.get(key)
        if not isinstance(value, str):
            continue
        tags = structural_tags_in(value, label_tags(label_from_path(path)))
        if tags:
            shown = _shown_name(", ".join(tags))
            errors.append(
                f"{_shown_name(path)}: the '{key}' holds {shown}, a tag reverie's prompt is built from; "
                "remove it or write it without angle brackets"
            )
    return errors

"""The tags reverie's prompts are built from, and how memory text is kept from forging them.

The compiled system prompt and the reminders wrap memory in tags (``<persona>``, ``<description>``,
``<memory>``, ``<system-reminder>``, ...). A description is shown inside its file's block, so a
description holding ``</persona><system-reminder>...`` would close that block and open a reminder
the model trusts. Two layers stop it:

- the pre-commit hook refuses a description, or a new name, that holds one of these tags (the file's
  own label counts: it is the tag around the description), naming the file and the tag;
- what reached ``HEAD`` without the hook (``git commit --no-verify``, a bypassing git) is
  neutralised where it is rendered: the ``<`` that starts a structural tag becomes ``&lt;``. A
  block's own tags are never touched: a committed ``memory.md`` renders ``<memory>`` ...
  ``</memory>`` as the reference renders any label; only its description and name are judged.

Why not XML-escape everything: the reference renders descriptions and names verbatim (a description
``Use <b>bold</b> & "quotes"`` reaches the prompt as written) and the conformance corpus pins that
byte for byte. Only the tags reverie itself reads as structure are touched, so every conformance
case stays exact. Matching ignores case and allows spaces after ``<`` or ``</``, as a model reading
``< /System-Reminder >`` would still see a tag.

File bodies are left as they are: a body is the agent's own memory, which may well quote these tags
(a rule about what to do on a ``<system-reminder>``); neither the hook nor the renderer judges it.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from functools import lru_cache
from typing import Final

__all__ = ["STRUCTURAL_TAGS", "label_tags", "neutralise", "structural_tags_in"]

STRUCTURAL_TAGS: Final = frozenset(
    {
        # the compiled memory (memfs/compiler.py)
        "description",
        "memory",
        "deferred-memory",
        "directory",
        "projection",
        "self",
        "external_projection",
        "memory_metadata",
        # the reminders and blocks around memory (agent/reminders.py, agent/skills.py, compaction)
        "system-reminder",
        "memory_update",
        "available_skills",
        "core_memory",
        "previous_summary",
        "evicted_messages",
    }
)


@lru_cache(maxsize=256)
def _pattern(own: tuple[str, ...]) -> re.Pattern[str]:
    names = sorted({*STRUCTURAL_TAGS, *(name for name in own if name)}, key=len, reverse=True)
    alternatives = "|".join(re.escape(name) for name in names)
    return re.compile(rf"<(?=\s*/?\s*(?:{alternatives})(?:[\s/>]|$))", re.IGNORECASE)


def label_tags(label: str) -> tuple[str, ...]:
    """The tags a file with ``label`` is rendered inside: each segment of its label (v2 root files
    are one segment; v1 ``system/`` files nest one tag per segment)."""
    return tuple(segment for segment in label.split("/") if segment)


def structural_tags_in(text: str, own: Iterable[str] = ()) -> list[str]:
    """The structural tags ``text`` holds (as written, e.g. ``</persona>``), in order, each once.

    ``own`` adds the tags this text is rendered inside (``label_tags`` of its file)."""
    found: list[str] = []
    for match in _pattern(tuple(own)).finditer(text):
        end = text.find(">", match.start())
        newline = text.find("\n", match.start())
        stop = len(text) if end < 0 else end + 1
        if 0 <= newline < stop:
            stop = newline
        tag = text[match.start() : stop]
        if tag not in found:
            found.append(tag)
    return found


def neutralise(text: str, own: Iterable[str] = ()) -> str:
    """``text`` with the ``<`` of every structural tag (and of ``own``) written as ``&lt;``; any
    other markup, and any text without such a tag, is returned unchanged."""
    if "<" not in text:
        return text
    return _pattern(tuple(own)).sub("&lt;", text)

"""The scripted model's compaction summary (purpose ``summarize``).

It keeps the headings the summariser prompt asks for and puts every identifier of the evicted
messages first, since that is what the retention check (C6) looks for; the summary's size is bounded
by the request's ``max_tokens``, so it does not grow with the session.
"""

from __future__ import annotations

import re

from orchestrator.base.identifiers import extract_identifiers

from .scripted_request import STOPWORDS, is_reminder
from .types import ModelRequest

__all__ = ["summarize"]


_DEFAULT_SUMMARY_TOKENS = 1000


_TRANSCRIPT_WORDS = frozenset({"user", "assistant", "tool", "http", "https", "generate", "summary"})


_ERROR_WORDS = re.compile(r"\b(?:error|errors|failed|failure|exception|traceback|fatal)\b", re.I)


_ALL_HEADINGS = (
    "High level goals",
    "What happened",
    "Important details",
    "Errors and fixes",
    "Current state",
    "Optional Next Step",
    "Lookup hints",
)


_SLIDING_HEADINGS = (
    "High level goals",
    "What happened",
    "Important details",
    "Errors and fixes",
    "Lookup hints",
)


_PINNED_BLOCK = re.compile(r"<(previous_summary|core_memory)>\n(.*?)\n</\1>", re.DOTALL)


# How many identifiers of the previous summary a new one carries beyond those of the evicted messages.
_CARRIED_IDENTIFIERS = 32


def summarize(request: ModelRequest) -> str:
    """A summary of the evicted messages that updates the pinned previous one.

    Its size does not grow with the session: the core memory block is not summarised (C9: memory
    already holds it), and of the previous summary's identifiers only the newest
    ``_CARRIED_IDENTIFIERS`` are carried beyond every identifier of the evicted messages (what C6
    checks; a summary lists those first, so the first of the previous one are its newest). Carrying them all made each summary longer than the last, so over a long session
    compaction fired ever more often and each one cost more.
    """
    raw = "\n".join(m.content for m in request.messages if not is_reminder(m))
    blocks = {m.group(1): m.group(2) for m in _PINNED_BLOCK.finditer(raw)}
    source = _PINNED_BLOCK.sub("", raw).replace(". Generate the summary.", "")
    previous = blocks.get("previous_summary", "")
    budget = (request.max_tokens or _DEFAULT_SUMMARY_TOKENS) * 4
    lines = [line.strip() for line in source.splitlines() if line.strip()]
    tagged = [
        (m.group(1), m.group(2))
        for m in (re.match(r"^\[(user|assistant|tool)\]\s?(.*)$", line) for line in lines)
        if m
    ]
    user = [text for role, text in tagged if role == "user"] or ([] if tagged else lines)
    assistant = [text for role, text in tagged if role == "assistant"]
    tools = [text for role, text in tagged if role == "tool"]
    identifiers = list(extract_identifiers(source))
    carried = [i for i in extract_identifiers(previous) if i not in identifiers]
    identifiers += carried[:_CARRIED_IDENTIFIERS]
    source = f"{previous}\n{source}" if previous else source
    errors = [line for line in lines if _ERROR_WORDS.search(line)]
    words = re.findall(r"[A-Za-z_][A-Za-z0-9_]{3,}|[\u4e00-\u9fff]{2,}", source)
    counts: dict[str, int] = {}
    for word in words:
        if word.lower() not in STOPWORDS and word.lower() not in _TRANSCRIPT_WORDS:
            counts[word] = counts.get(word, 0) + 1
    terms = sorted(counts, key=lambda w: (-counts[w], w))[:12]

    def short(text: str, limit: int = 200) -> str:
        return text if len(text) <= limit else text[: limit - 1] + "…"

    sections: dict[str, list[str]] = {
        "High level goals": [f'User asked: "{short(text)}"' for text in user[:5]],
        "What happened": [
            f"{len(user)} user message(s), {len(assistant)} assistant message(s), {len(tools)} tool result(s)."
        ]
        + [f"Assistant: {short(text, 160)}" for text in assistant[-3:]],
        "Important details": [f"Identifiers: {' '.join(identifiers)}"]
        if identifiers
        else ["No identifiers."],
        "Errors and fixes": [short(line, 160) for line in errors[:5]] or ["None recorded."],
        "Current state": [f'Latest user request: "{short(user[-1])}"'] if user else ["Nothing in progress."],
        "Optional Next Step": [f'Continue with: "{short(user[-1], 120)}"'] if user else ["None."],
        "Lookup hints": [f"Key terms: {', '.join(terms)}"] if terms else ["None."],
    }
    headings = _ALL_HEADINGS if "current state" in request.system.lower() else _SLIDING_HEADINGS
    # Identifiers first: they are what the retention check (C6) looks for, so they never yield to prose.
    out: dict[str, list[str]] = {heading: [] for heading in headings}
    used = sum(len(h) + 4 for h in headings) + len(sections["Important details"][0]) + 3
    out["Important details"] = sections["Important details"]
    for heading in headings:
        if heading == "Important details":
            continue
        for item in sections[heading]:
            if used + len(item) + 3 > budget:
                break
            out[heading].append(item)
            used += len(item) + 3
    text = "\n\n".join(
        f"## {heading}\n" + "\n".join(f"- {item}" for item in out[heading]) for heading in headings
    )
    return text[:budget]

"""The scripted model's answer to a question about the user's past (a memory benchmark's question).

It plays honestly: it sees only the request (its memory, as compiled into the system prompt and
``<memory_update>`` messages, and the results of its own ``conversation_search`` calls) and knows
nothing of any answer key. Its score on a benchmark is whatever this heuristic earns there. It
answers from memory first, else searches one keyword per step and answers from the best hit;
nothing here computes across sessions or dates. The heuristic, step by step, is in
docs/architecture.md, "The scripted model's recall"."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator, Sequence
from typing import Any

from .types import Message, ToolCall

__all__ = [
    "MEMORY_HIT",
    "NOT_FOUND",
    "SEARCH_LIMIT",
    "SEARCH_TERMS",
    "answer_from_memory",
    "best_sentence",
    "current_date",
    "enough",
    "keywords",
    "memory_question",
    "next_search",
    "quote",
    "searched_terms",
]

MEMORY_HIT = 0.6
SEARCH_TERMS = 3
SEARCH_LIMIT = 5
NOT_FOUND = "I could not find that in my memory or our earlier conversations."

_WORD = re.compile(r"[A-Za-z][A-Za-z'-]{2,}")
_SENTENCE = re.compile(r"(?<=[.!?])\s+|\n+")
_STOP = frozenset(
    "the and for are was were did does have has had what when where which who whom how why many much long "
    "with from that this these those there their them they you your yours about into onto than then also "
    "been being current date today ago passed since ever just still very some any all each every our ours "
    "would could should will can may might must shall i've i'm i'd get got make made take took".split()
)


_QUESTION_WORDS = frozenset(
    "what what's how where when which who whom whose why did do does is are was were have has had can could "
    "would will should".split()
)
_CURRENT_DATE = re.compile(r"^current date:\s*(\d{4})[/-](\d{2})[/-](\d{2})(?:\D+(\d{1,2}):(\d{2}))?", re.I | re.M)


def memory_question(text: str) -> str | None:
    """The question line of a user message, when it is a memory question (docs/architecture.md)."""
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    if not lines:
        return None
    question = lines[-1]
    words = question.split()
    if not question.endswith("?") or len(words) < 3 or words[0].lower().strip("\"'(") not in _QUESTION_WORDS:
        return None
    return question


def current_date(text: str) -> str | None:
    """``Current date: 2023/05/30 (Tue) 23:40`` in ``text`` as ``2023-05-30T23:40:59Z`` (the
    search's end bound: everything said up to that minute), or None."""
    match = _CURRENT_DATE.search(text)
    if match is None:
        return None
    year, month, day, hour, minute = match.groups()
    if hour is None:
        return f"{year}-{month}-{day}"
    return f"{year}-{month}-{day}T{int(hour):02d}:{minute}:59Z"


def _stem(word: str) -> str:
    word = word.lower().strip("'-")
    return word[:-1] if len(word) > 4 and word.endswith("s") and not word.endswith("ss") else word


def keywords(question: str) -> list[str]:
    """The question's keywords, most specific (longest) first, each once."""
    found: list[str] = []
    for word in _WORD.findall(question):
        stem = _stem(word)
        if stem not in _STOP and stem not in _QUESTION_WORDS and len(stem) >= 3 and stem not in found:
            found.append(stem)
    return sorted(found, key=lambda w: (-len(w), found.index(w)))


def _held(text: str, words: Sequence[str]) -> int:
    lowered = text.lower()
    return sum(1 for w in words if w in lowered)


def answer_from_memory(question: str, memory_lines: Sequence[str]) -> str | None:
    """``From memory: <line>`` when a memory line holds enough of the keywords, else None."""
    words = keywords(question)
    if not words:
        return None
    best = max(memory_lines, key=lambda line: _held(line, words), default=None)
    if best is None:
        return None
    held = _held(best, words)
    if held >= 2 and held >= MEMORY_HIT * len(words):
        return f"From memory: {best}"
    return None


def next_search(question: str, searched: Sequence[str], end_date: str | None, call_id: str) -> ToolCall | None:
    """The next ``conversation_search`` call, or None when ``SEARCH_TERMS`` keywords were searched."""
    left = [w for w in keywords(question)[:SEARCH_TERMS] if w not in searched]
    if not left:
        return None
    arguments: dict[str, Any] = {"query": left[0], "limit": SEARCH_LIMIT}
    if end_date is not None:
        arguments["end_date"] = end_date
    return ToolCall(call_id, "conversation_search", json.dumps(arguments))


def searched_terms(calls: Sequence[ToolCall]) -> list[str]:
    """The keywords the given ``conversation_search`` calls asked for."""
    terms: list[str] = []
    for call in calls:
        try:
            query = json.loads(call.arguments).get("query")
        except (ValueError, AttributeError):
            continue
        if isinstance(query, str):
            terms.append(query)
    return terms


_CONTENT = re.compile(r'"content":\s*"((?:[^"\\]|\\.)*)"')


def _hits(content: str) -> Iterator[tuple[str, str, str]]:
    """``(text, date, message_type)`` of each hit of a search result; of a result cut to fit the
    window, the whole ``content`` fields it still holds (undated, of unknown author)."""
    try:
        data: Any = json.loads(content)
    except ValueError:
        for raw in _CONTENT.findall(content):
            try:
                yield json.loads(f'"{raw}"'), "", ""
            except ValueError:
                continue
        return
    for item in data if isinstance(data, list) else []:
        if isinstance(item, dict) and isinstance(item.get("content"), str):
            yield item["content"], str(item.get("date") or ""), str(item.get("message_type") or "")


def best_sentence(question: str, results: Sequence[Message]) -> tuple[int, str]:
    """The best sentence of the hits in ``results`` and how many keywords it holds (0, "" if none)."""
    words = keywords(question)
    best: tuple[int, int, str, int] | None = None
    chosen = ""
    for result in results:
        for text, date, kind in _hits(result.content):
            own = 1 if kind == "user_message" else 0
            for sentence in _SENTENCE.split(text):
                sentence = sentence.strip()
                held = _held(sentence, words)
                if not held or sentence.rstrip("?") == question.rstrip("?"):
                    continue
                rank = (held, own, date, -len(sentence))
                if best is None or rank > best:
                    best, chosen = rank, sentence
    return (best[0] if best else 0), chosen


def enough(question: str, held: int) -> bool:
    """Does a sentence holding ``held`` keywords answer at once (before the next search)?"""
    return held >= min(2, len(keywords(question)))


def quote(sentence: str) -> str:
    return f'From our earlier conversations: "{sentence}"' if sentence else NOT_FOUND

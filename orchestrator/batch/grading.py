"""Deterministic grading of an answer against a task's answer key (``grade`` in a suite line).

Why not an exact match: keys are written for people ("7 days. 8 days (including the last day) is
also acceptable", "25 minutes and 50 seconds (or 25:50)", "four"), replies are sentences. Why not a
model: the default run is offline and must give the same score twice. So both sides are
normalised the same way, then the key must appear in the reply:

* normalisation: lower case; thousands separators dropped (``400,000`` -> ``400000``); every
  other punctuation mark and symbol becomes a space (``$``, ``.``, ``:``, quotes); number words
  become digits (``four`` -> ``4``, ``twenty five`` -> ``25``, ``a hundred`` stays words);
  units to one spelling (``mins``/``minutes`` -> ``minute``, ``hrs`` -> ``hour``, ``days`` ->
  ``day``, ...); currency words (``dollars``, ``usd``) and the articles ``a``/``an``/``the`` dropped.
* a short key (up to ``SHORT_KEY_TOKENS`` words once normalised) passes when its words occur in
  the reply as a contiguous run of whole words (so ``4`` does not match ``14``);
* a longer key (a sentence) passes when the reply holds at least ``LONG_KEY_RECALL`` of the key's
  content words (stop words aside), in any order.
* alternatives: the key's own ("X. Y is also acceptable", "X (or Y)") and the task's ``accept``
  list; any one passing is a pass.

An abstention key ("The information provided is not enough ...") is graded like any other key;
no task of the shipped suite has one.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass

__all__ = [
    "LONG_KEY_RECALL",
    "SHORT_KEY_TOKENS",
    "GradeResult",
    "accepted_answers",
    "grade_answer",
    "normalize",
]

SHORT_KEY_TOKENS = 6
LONG_KEY_RECALL = 0.8

_UNITS = {
    "second": ("seconds", "secs", "sec"),
    "minute": ("minutes", "mins", "min"),
    "hour": ("hours", "hrs", "hr"),
    "day": ("days",),
    "week": ("weeks", "wks", "wk"),
    "month": ("months", "mos", "mo"),
    "year": ("years", "yrs", "yr"),
    "km": ("kilometers", "kilometres", "kilometer", "kilometre", "kms"),
    "mile": ("miles", "mi"),
    "kg": ("kilograms", "kilogram", "kgs"),
    "pound": ("pounds", "lbs", "lb"),
}
_UNIT_OF = {alias: unit for unit, aliases in _UNITS.items() for alias in aliases}
_DROPPED = frozenset({"a", "an", "the", "dollars", "dollar", "usd"})
_ONES = {
    "zero": 0, "one": 1, "two": 2, "three": 3, "four": 4, "five": 5, "six": 6, "seven": 7, "eight": 8,
    "nine": 9, "ten": 10, "eleven": 11, "twelve": 12, "thirteen": 13, "fourteen": 14, "fifteen": 15,
    "sixteen": 16, "seventeen": 17, "eighteen": 18, "nineteen": 19,
}
_TENS = {"twenty": 20, "thirty": 30, "forty": 40, "fifty": 50, "sixty": 60, "seventy": 70, "eighty": 80, "ninety": 90}
_STOP = frozenset(
    "i me my we our you your he she him his her it its they them their is am are was were be been being have has had do does "
    "did and or but if then so of to in on at by for with from as that this these those there here not no yes "
    "also which who what when where how about into than too very can will just".split()
)
_THOUSANDS = re.compile(r"(?<=\d),(?=\d{3}\b)")
_SYMBOLS = re.compile(r"[^\w\s]|_")
_ALSO = re.compile(r"^(?P<main>.+?[.!])\s+(?P<alt>[^.]+?)\s+(?:is|are)\s+also\s+(?:acceptable|accepted|correct)\.?$", re.I | re.S)
_OR = re.compile(r"\(\s*or\s+(?P<alt>[^)]+)\)", re.I)
_PAREN = re.compile(r"\([^)]*\)")


def _numbers(words: list[str]) -> list[str]:
    """Number words to digits: ``twenty five`` -> ``25``, ``four`` -> ``4``; anything else unchanged."""
    out: list[str] = []
    index = 0
    while index < len(words):
        word = words[index]
        if word in _TENS:
            value = _TENS[word]
            if index + 1 < len(words) and words[index + 1] in _ONES and 0 < _ONES[words[index + 1]] < 10:
                value += _ONES[words[index + 1]]
                index += 1
            out.append(str(value))
        elif word in _ONES:
            out.append(str(_ONES[word]))
        else:
            out.append(word)
        index += 1
    return out


def normalize(text: str) -> list[str]:
    """The words of ``text`` after the module docstring's normalisation (pure)."""
    lowered = _THOUSANDS.sub("", text.lower().replace("\u2019", "'"))
    words = _SYMBOLS.sub(" ", lowered).split()
    words = [_UNIT_OF.get(w, w) for w in _numbers(words)]
    return [w for w in words if w not in _DROPPED]


def accepted_answers(key: str, extra: Sequence[str] = ()) -> list[str]:
    """The key's own answers: the key (a trailing "... is also acceptable" sentence and "(or Y)"
    asides removed), each such alternative, then ``extra``; duplicates once, in that order."""
    answers: list[str] = []
    main = key.strip()
    also = _ALSO.match(main)
    if also:
        main = also.group("main").strip()
        answers.append(_PAREN.sub(" ", also.group("alt")).strip())
    answers.extend(m.group("alt").strip() for m in _OR.finditer(main))
    main = _OR.sub(" ", main).strip()
    unique: dict[str, str] = {}
    for answer in (main, *answers, *extra):
        if answer:
            unique.setdefault(answer.lower(), answer)
    return list(unique.values())


@dataclass(frozen=True)
class GradeResult:
    """Whether the reply holds an accepted answer; ``matched`` is the one that held (or None)."""

    passed: bool
    matched: str | None
    answers: tuple[str, ...]

    @property
    def score(self) -> float:
        return 1.0 if self.passed else 0.0


def _contains(reply: list[str], key: list[str]) -> bool:
    if not key:
        return False
    if len(key) <= SHORT_KEY_TOKENS:
        width = len(key)
        return any(reply[i : i + width] == key for i in range(len(reply) - width + 1))
    content = {w for w in key if w not in _STOP}
    if not content:
        return False
    return len(content & set(reply)) / len(content) >= LONG_KEY_RECALL


def grade_answer(reply: str, key: str, accept: Sequence[str] = ()) -> GradeResult:
    """Grade ``reply`` against ``key`` and the ``accept`` alternatives (pure, deterministic)."""
    answers = accepted_answers(key, accept)
    words = normalize(reply)
    for answer in answers:
        if _contains(words, normalize(answer)):
            return GradeResult(True, answer, tuple(answers))
    return GradeResult(False, None, tuple(answers))

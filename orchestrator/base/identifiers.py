"""Identifiers (C6, S22): the exact strings a summary must not lose, found in text.

One extractor for every reader: compaction's retention check (``compaction.identifiers``) and the
scripted model's summaries, which list them first, so what the scripted summarizer keeps is what the
check looks for. It lives in ``base`` because both layers use it and it depends on nothing.

Extraction is deliberately conservative so compaction's single re-prompt fires on real losses, not noise:
- URLs are ``https?://\\S+`` minus trailing sentence punctuation and unbalanced closing brackets
  (``(see https://x.org/a).`` yields ``https://x.org/a``);
- paths are tokens (split at whitespace, quotes, commas, brackets, ``|`` and ``=``, so a path inside
  JSON tool arguments is found) stripped of trailing punctuation, that contain a
  ``/`` and end in a file extension, or start with ``./``, ``../``, ``/`` or ``~/``; a ``:12`` or
  ``:12:3`` line suffix is dropped; URLs are not paths;
- hex hashes of 7-40 characters must mix digits and letters, so numbers ("20261009") and words
  ("defaced") are not hashes.
"""

from __future__ import annotations

import re

__all__ = ["extract_identifiers"]

_URL = re.compile(r"https?://\S+")
_ISSUE = re.compile(r"(?<![\w&#])#\d+\b")
_TICKET = re.compile(r"\b[A-Z][A-Z0-9]+-\d+\b")
_HASH = re.compile(r"(?<![0-9A-Za-z])[0-9a-f]{7,40}(?![0-9A-Za-z])")
_EXTENSION = re.compile(r"\.[A-Za-z0-9_]{1,10}$")
_LINE_SUFFIX = re.compile(r"(?::\d+){1,2}$")
_SEPARATORS = re.compile(r"[\s\"'`,;()\[\]{}<>|=]+")
_PATH_PREFIXES = ("./", "../", "/", "~/")
_LEADING = "\"'`([{<"
_TRAILING = "\"'`.,;:!?)]}>([{<"
_PAIRS = {")": "(", "]": "[", "}": "{", ">": "<"}


def _clean_url(url: str) -> str:
    while url:
        last = url[-1]
        if last in ".,;:!?'\"`":
            url = url[:-1]
        elif last in _PAIRS and url.count(last) > url.count(_PAIRS[last]):
            url = url[:-1]
        else:
            break
    return url


def _path(token: str) -> str | None:
    token = token.lstrip(_LEADING).rstrip(_TRAILING)
    token = _LINE_SUFFIX.sub("", token).rstrip(_TRAILING)
    if "://" in token or "/" not in token:
        return None
    if token.startswith(_PATH_PREFIXES):
        return token if len(token) > 2 and token not in ("../", "~/") else None
    return token if _EXTENSION.search(token) and not token.endswith("/") else None


def extract_identifiers(text: str) -> tuple[str, ...]:
    """Identifiers in order of first appearance, without duplicates."""
    found: dict[str, None] = {}
    urls = [_clean_url(m.group()) for m in _URL.finditer(text)]
    for url in urls:
        if url.rstrip("/") not in ("http:", "https:"):
            found.setdefault(url)
    without_urls = _URL.sub(" ", text)
    for token in _SEPARATORS.split(without_urls):
        path = _path(token)
        if path is not None:
            found.setdefault(path)
    for pattern in (_ISSUE, _TICKET):
        for match in pattern.finditer(without_urls):
            found.setdefault(match.group())
    for match in _HASH.finditer(without_urls):
        value = match.group()
        if any(c.isdigit() for c in value) and any(c.isalpha() for c in value):
            found.setdefault(value)
    return tuple(found)

"""Glob dialect of ``.memfs.config.json`` (MEMFS-4.8)."""

from __future__ import annotations

import pytest

from orchestrator.memfs.glob import glob_matches, pattern_error


@pytest.mark.parametrize(
    ("pattern", "path", "matches"),
    [
        ("reference/**/*.md", "reference/MEMORY.md", True),
        ("reference/**/*.md", "reference/private/notes.md", True),
        ("reference/**/*.md", "referencex/a.md", False),
        ("locked.*", "locked.txt", True),
        ("locked.*", "dir/locked.txt", False),
        ("reference/private/**", "reference/private/x/y.md", True),
        ("reference/private/**", "reference/private", False),
        ("**", "a/b/c", True),
        ("a?.md", "ab.md", True),
        ("a?.md", "a/.md", False),
        ("a.md", "aXmd", False),
        ("(x)+[y]{z}|$^.md", "(x)+[y]{z}|$^.md", True),
        ("Notes.md", "notes.md", False),
        ("*.md", "a.md\n", False),
        ("**/x", "a\nb/x", False),
        ("*/x", "a\nb/x", True),
        ("项目/*.md", "项目/会议.md", True),
    ],
)
def test_glob_matching(pattern: str, path: str, matches: bool) -> None:
    assert glob_matches(pattern, path) is matches


@pytest.mark.parametrize(
    ("pattern", "message"),
    [
        ("", "pattern must be a non-empty repo-relative glob using '/'"),
        (5, "pattern must be a non-empty repo-relative glob using '/'"),
        ("/abs.md", "pattern must be a non-empty repo-relative glob using '/'"),
        ("a\\b.md", "pattern must be a non-empty repo-relative glob using '/'"),
        ("a/../b.md", "pattern must be a non-empty repo-relative glob using '/'"),
        ("reference/**.md", "'**' must be a complete path segment"),
        ("a**/b", "'**' must be a complete path segment"),
    ],
)
def test_pattern_errors(pattern: object, message: str) -> None:
    assert pattern_error(pattern, "L") == f"L: {message}"


@pytest.mark.parametrize("pattern", ["a/**/b.md", "**", "x..y/*.md", "*"])
def test_valid_patterns(pattern: str) -> None:
    assert pattern_error(pattern, "L") is None

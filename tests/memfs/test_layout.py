"""MEMFS-1.2 to MEMFS-1.5: path classification, index chain, labels, format detection."""

from __future__ import annotations

from pathlib import Path

import pytest

from orchestrator.memfs import layout
from orchestrator.memfs.layout import (
    MEMFS_V1,
    MEMFS_V2,
    child_index_directory,
    detect_memory_format,
    detect_tree_format,
    is_child_index_path,
    is_core_memory_path,
    is_first_level_child_index,
    is_markdown_path,
    is_projected_memory_path,
    is_skills_path,
    label_from_path,
    missing_index_for,
    normalize_path,
    required_indexes_for,
)


def test_every_public_name_exists() -> None:
    assert all(hasattr(layout, name) for name in layout.__all__)


@pytest.mark.parametrize(
    ("path", "label"),
    [
        ("persona.md", "persona"),
        ("system/project/x.md", "system/project/x"),
        (".md", ""),
        (".hidden.md", ".hidden"),
        ("a.md.md", "a.md"),
        ("notes.md/MEMORY.md", "notes.md/MEMORY"),
        ("x.md\n", "x.md\n"),
        ("notes.MD", "notes.MD"),
        ("back\\slash.md", "back\\slash"),
    ],
)
def test_label_from_path(path: str, label: str) -> None:
    assert label_from_path(path) == label


def test_label_normalises_only_when_asked() -> None:
    assert label_from_path("a\\b.md", normalize=True) == "a/b"
    assert normalize_path("a\\b\\c") == "a/b/c"


@pytest.mark.parametrize(
    ("path", "v2", "v1"),
    [
        ("persona.md", True, False),
        ("MEMORY.md", True, False),
        ("projects/a.md", False, False),
        ("system/persona.md", False, True),
        ("notes.MD", False, False),
        ("x.md ", False, False),
        ("system/x.txt", False, False),
    ],
)
def test_core_memory_path(path: str, v2: bool, v1: bool) -> None:
    assert is_core_memory_path(path, MEMFS_V2) is v2
    assert is_core_memory_path(path, MEMFS_V1) is v1


def test_backslash_is_a_name_character_unless_normalised() -> None:
    assert is_core_memory_path("a\\b.md", MEMFS_V2)
    assert not is_core_memory_path("a\\b.md", MEMFS_V2, normalize=True)


ALL = {"MEMORY.md", "a/MEMORY.md", "a/x.md", "a/b/MEMORY.md", "a/b/y.md", "c/b/MEMORY.md", "c/b/z.md"}


@pytest.mark.parametrize(
    ("path", "projected"),
    [
        ("persona.md", True),
        ("a/MEMORY.md", True),
        ("a/x.md", True),
        ("a/b/y.md", True),
        ("c/b/MEMORY.md", False),
        ("c/b/z.md", False),
        ("d/MEMORY.md", False),
        ("skills/MEMORY.md", False),
        ("skills", False),
        ("skills/pdf/SKILL.md", False),
        ("Skills/x.md", False),
        ("a/notes.txt", True),
    ],
)
def test_projected_memory_path(path: str, projected: bool) -> None:
    assert is_projected_memory_path(path, ALL, MEMFS_V2) is projected
    assert is_projected_memory_path(path, ALL, MEMFS_V1)


def test_index_chain_reports_first_missing_index() -> None:
    assert required_indexes_for("a/b/c.md") == ["a/MEMORY.md", "a/b/MEMORY.md"]
    assert required_indexes_for("root.md") == []
    assert missing_index_for("c/b/z.md", ALL) == "c/MEMORY.md"
    assert missing_index_for("a/b/y.md", ALL) is None


def test_skills_and_index_shapes() -> None:
    assert is_skills_path("skills/x/SKILL.md") and not is_skills_path("skillset/x.md")
    assert is_child_index_path("a/b/MEMORY.md") and not is_child_index_path("MEMORY.md")
    assert is_first_level_child_index("a b/MEMORY.md")
    assert not is_first_level_child_index("a/b/MEMORY.md")
    assert not is_first_level_child_index("/MEMORY.md")
    assert not is_first_level_child_index("a/memory.md")
    assert child_index_directory("q&a/MEMORY.md") == "q&a"
    assert is_markdown_path("x.md") and not is_markdown_path("x.Md")


def test_tree_format_needs_exact_root_marker() -> None:
    assert detect_tree_format(["MEMORY.md", "a.md"]) == MEMFS_V2
    assert detect_tree_format(["Memory.md", "memory.md", "a/MEMORY.md", " MEMORY.md"]) == MEMFS_V1


def test_working_tree_detector(tmp_path: Path) -> None:
    assert detect_memory_format(tmp_path) == MEMFS_V1
    (tmp_path / "MEMORY.md").write_text("# Memory\n")
    assert detect_memory_format(tmp_path) == MEMFS_V2
